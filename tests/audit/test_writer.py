"""DecisionLog: the structlog pipeline, the chain it writes, and concurrent writers."""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import threading
from typing import Any

import pytest
import structlog

from retryctl.audit import DecisionLog, VerdictRecord, read_records, verify_log
from retryctl.controller import ManualClock
from retryctl.exceptions import ConfigError
from tests.audit.helpers import GENESIS, independent_hash, make_verdict, read_lines


def _verdict_kwargs(i: int = 0, run_id: str = "run") -> dict[str, Any]:
    return {
        "run_id": run_id,
        "step_id": f"q{i}",
        "attempt": i,
        "candidates_summary": {"answers": {"12": 2}},
        "latency_ms": 3.5,
    }


@pytest.fixture
def log_path(tmp_path):
    return str(tmp_path / "decisions.jsonl")


class TestDecisionLog:
    def test_returned_record_is_the_line_written(self, log_path):
        with DecisionLog(log_path, clock=ManualClock(0.0)) as log:
            written = log.record_verdict(make_verdict(), **_verdict_kwargs())
        (line,) = read_lines(log_path)
        assert json.loads(line) == written

    def test_hash_follows_the_documented_rule_and_chains_from_genesis(self, log_path):
        with DecisionLog(log_path, clock=ManualClock(0.0)) as log:
            first = log.record_verdict(make_verdict(), **_verdict_kwargs(0))
            second = log.record_verdict(make_verdict(), **_verdict_kwargs(1))
            assert log.head == second["hash"]
        assert first["prev_hash"] == GENESIS
        assert second["prev_hash"] == first["hash"]
        for line in read_lines(log_path):
            record = json.loads(line)
            assert record["hash"] == independent_hash(record)

    def test_reopening_continues_the_chain(self, log_path):
        with DecisionLog(log_path) as log:
            first = log.record_verdict(make_verdict(), **_verdict_kwargs(0))
        with DecisionLog(log_path) as log:
            assert log.head == first["hash"]
            second = log.record_verdict(make_verdict(), **_verdict_kwargs(1))
        assert second["prev_hash"] == first["hash"]
        assert verify_log(log_path).records == 2

    def test_wall_clock_timestamp_uses_structlogs_iso_format(self, log_path):
        before = datetime.datetime.now(tz=datetime.UTC)
        with DecisionLog(log_path) as log:
            ts = log.record_verdict(make_verdict(), **_verdict_kwargs())["ts"]
        after = datetime.datetime.now(tz=datetime.UTC)
        assert ts.endswith("Z")
        assert before <= datetime.datetime.fromisoformat(ts) <= after

    def test_user_processors_run_and_their_keys_are_chained(self, log_path):
        seen: list[str] = []

        def add_host(_logger, name, event_dict):
            seen.append(event_dict["event"])
            event_dict["host"] = "worker-3"
            return event_dict

        with DecisionLog(log_path, processors=[add_host]) as log:
            log.record_verdict(make_verdict(), **_verdict_kwargs())
            log.record_summary(
                run_id="run",
                step_id="q0",
                final_answer=None,
                sampling_history=[],
                budget_used={"samples": 1},
                budget_max={"samples": 2},
            )
        assert seen == ["verdict", "summary"]
        records = [json.loads(line) for line in read_lines(log_path)]
        assert [r["host"] for r in records] == ["worker-3", "worker-3"]
        assert all(r["hash"] == independent_hash(r) for r in records)
        assert verify_log(log_path).ok

    def test_a_processor_that_drops_the_record_is_an_error(self, log_path):
        def drop(_logger, _name, _event_dict):
            raise structlog.DropEvent

        with DecisionLog(log_path, processors=[drop]) as log, pytest.raises(ConfigError) as info:
            log.record_verdict(make_verdict(), **_verdict_kwargs())
        assert info.value.field == "processors"

    def test_a_processor_may_not_set_the_chain_fields(self, log_path):
        def forge(_logger, _name, event_dict):
            event_dict["prev_hash"] = "f" * 64
            return event_dict

        with DecisionLog(log_path, processors=[forge]) as log, pytest.raises(ValueError):
            log.record_verdict(make_verdict(), **_verdict_kwargs())
        assert read_lines(log_path) == []

    def test_a_non_callable_processor_is_a_config_error(self, log_path):
        with pytest.raises(ConfigError) as info:
            DecisionLog(log_path, processors=["not a processor"])  # type: ignore[list-item]
        assert info.value.field == "processors[0]"

    def test_writing_after_close_is_refused(self, log_path):
        log = DecisionLog(log_path)
        log.close()
        log.close()
        with pytest.raises(ValueError, match="closed"):
            log.record_verdict(make_verdict(), **_verdict_kwargs())

    def test_fsync_is_called_once_per_record_when_asked(self, log_path, monkeypatch):
        calls: list[int] = []
        real_fsync = os.fsync

        def counting_fsync(fd: int) -> None:
            calls.append(fd)
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", counting_fsync)
        with DecisionLog(log_path, fsync=True) as log:
            for i in range(3):
                log.record_verdict(make_verdict(), **_verdict_kwargs(i))
        assert len(calls) == 3
        with DecisionLog(log_path) as log:
            log.record_verdict(make_verdict(), **_verdict_kwargs(3))
        assert len(calls) == 3
        assert verify_log(log_path).records == 4

    def test_nested_keys_named_like_chain_keys_still_verify(self, log_path):
        tricky = {"run_id": "other", "schema": 2, "prev_hash": "x", "note": 'a "quoted" \\ path'}
        with DecisionLog(log_path) as log:
            log.record_verdict(make_verdict(), **_verdict_kwargs(0, "r1"), extra=tricky)
            log.record_verdict(make_verdict(), **_verdict_kwargs(1, 'r"2\\'))
            log.record_verdict(make_verdict(), **_verdict_kwargs(2, "r1"))
        report = verify_log(log_path)
        assert report.ok, report.error
        assert report.records == 3 and report.runs == 2
        records = list(read_records(log_path))
        assert all(isinstance(r, VerdictRecord) for r in records)
        assert records[0].extra == tricky  # type: ignore[union-attr]
        assert [r.run_id for r in records] == ["r1", 'r"2\\', "r1"]  # type: ignore[union-attr]

    @pytest.mark.parametrize("value", [1e-05, 9.99e-05, 1e-07, 1e16, 1.5e22, 0.1 + 0.2, 3.5, 123456.789])
    def test_every_line_is_the_json_dumps_encoding_whatever_the_floats(self, log_path, value):
        # The writer may encode with orjson; the bytes must be json.dumps's all the same, or a verifier
        # that re-serialises a line (the documented hash rule) would disagree with the stored hash.
        from retryctl.audit._canonical import encode_line

        with DecisionLog(log_path) as log:
            log.record_verdict(
                make_verdict(confidence=value if value <= 1 else None),  # a confidence is in [0, 1]
                **{**_verdict_kwargs(0), "latency_ms": value, "candidates_summary": {"x": [value, -value]}},
            )
            log.record_verdict(make_verdict(), **_verdict_kwargs(1))
        for line in read_lines(log_path):
            record = json.loads(line)
            body = {k: v for k, v in record.items() if k != "hash"}
            assert encode_line(body) == (line, record["hash"])  # the json.dumps path, byte for byte
            assert record["hash"] == independent_hash(record)

    def test_two_logs_on_one_file_in_one_process_keep_one_chain(self, log_path):
        # Each sees the other's appends by the size change and re-reads the tail.
        with DecisionLog(log_path) as a, DecisionLog(log_path) as b:
            for i in range(5):
                (a if i % 2 else b).record_verdict(make_verdict(), **_verdict_kwargs(i))
        report = verify_log(log_path)
        assert report.ok and report.records == 5

    def test_threads_sharing_one_log_keep_one_chain(self, log_path):
        with DecisionLog(log_path) as log:
            barrier = threading.Barrier(4)

            def work(t: int) -> None:
                barrier.wait()
                for i in range(50):
                    log.record_verdict(make_verdict(), **_verdict_kwargs(i, f"thread-{t}"))

            threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        report = verify_log(log_path)
        assert report.ok, report.error
        assert report.records == 200 and report.runs == 4


def _process_writer(path: str, worker: int, n: int, barrier) -> None:
    # Large records make a torn or interleaved write far more likely if the locking were wrong.
    padding = "x" * 6000
    with DecisionLog(path) as log:
        barrier.wait()
        for i in range(n):
            log.record_verdict(
                make_verdict(),
                run_id=f"proc-{worker}",
                step_id=f"q{i}",
                attempt=i,
                candidates_summary={"pad": padding},
                latency_ms=1.0,
            )


def _inherited_writer(log: DecisionLog, worker: int, n: int) -> None:
    for i in range(n):
        log.record_verdict(make_verdict(), **_verdict_kwargs(i, f"child-{worker}"))


class TestDecisionLogAcrossProcesses:
    def test_four_processes_never_interleave_and_keep_one_chain(self, log_path):
        ctx = multiprocessing.get_context("fork")
        barrier = ctx.Barrier(4)
        procs = [ctx.Process(target=_process_writer, args=(log_path, w, 200, barrier)) for w in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        assert [p.exitcode for p in procs] == [0, 0, 0, 0]

        lines = read_lines(log_path)
        assert len(lines) == 800
        per_worker: dict[str, list[int]] = {}
        for line in lines:
            record = json.loads(line)  # an interleaved line would not parse
            per_worker.setdefault(record["run_id"], []).append(record["attempt"])
        assert sorted(per_worker) == [f"proc-{w}" for w in range(4)]
        for attempts in per_worker.values():
            assert attempts == list(range(200))
        report = verify_log(log_path)
        assert report.ok, report.error
        assert report.records == 800 and report.runs == 4

    def test_a_log_opened_before_fork_is_reopened_in_the_child(self, log_path):
        ctx = multiprocessing.get_context("fork")
        with DecisionLog(log_path) as log:
            log.record_verdict(make_verdict(), **_verdict_kwargs(0, "parent"))
            procs = [ctx.Process(target=_inherited_writer, args=(log, w, 100)) for w in range(2)]
            for p in procs:
                p.start()
            for i in range(1, 100):
                log.record_verdict(make_verdict(), **_verdict_kwargs(i, "parent"))
            for p in procs:
                p.join(timeout=120)
        assert [p.exitcode for p in procs] == [0, 0]
        report = verify_log(log_path)
        assert report.ok, report.error
        assert report.records == 300 and report.runs == 3

    def test_verifying_a_log_while_it_is_written_never_reports_a_false_torn_tail(self, log_path):
        ctx = multiprocessing.get_context("fork")
        barrier = ctx.Barrier(2)
        writer = ctx.Process(target=_process_writer, args=(log_path, 0, 300, barrier))
        writer.start()
        barrier.wait()
        checks = 0
        while writer.is_alive() or checks == 0:
            report = verify_log(log_path)
            assert report.ok, report.error
            checks += 1
        writer.join(timeout=120)
        assert writer.exitcode == 0
        assert verify_log(log_path).records == 300
