"""ChainSink: torn tails, repair, and what it refuses to chain onto."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from retryctl.audit import ChainSink, DecisionLog, RepairRecord, read_records, verify_log
from retryctl.exceptions import LogIntegrityError
from tests.audit.helpers import GENESIS, independent_hash, make_verdict, read_lines


def _write(path: str, n: int) -> list[dict[str, Any]]:
    with DecisionLog(path) as log:
        return [
            log.record_verdict(
                make_verdict(),
                run_id="r",
                step_id=f"q{i}",
                attempt=i,
                candidates_summary=None,
                latency_ms=1.0,
            )
            for i in range(n)
        ]


@pytest.fixture
def log_path(tmp_path):
    return str(tmp_path / "decisions.jsonl")


class TestChainSink:
    def test_empty_or_new_file_starts_at_genesis(self, log_path):
        sink = ChainSink(log_path, now=lambda: "t")
        assert sink.head == GENESIS
        sink.close()
        assert read_lines(log_path) == []

    def test_torn_tail_found_on_open_is_an_error_naming_the_line(self, log_path):
        _write(log_path, 3)
        with open(log_path, "ab") as f:
            f.write(b'{"action":"acc')  # a crash in the middle of the fourth write
        with pytest.raises(LogIntegrityError) as info:
            DecisionLog(log_path)
        assert info.value.line == 4 and info.value.index == 3
        assert "torn tail" in info.value.problem and "repair=True" in info.value.problem

    def test_repair_cuts_the_torn_bytes_and_records_the_cut(self, log_path):
        written = _write(log_path, 2)
        torn = b'{"action":"acc'
        with open(log_path, "ab") as f:
            f.write(torn)
        with DecisionLog(log_path, repair=True) as log:
            after = log.record_verdict(
                make_verdict(),
                run_id="r",
                step_id="q9",
                attempt=9,
                candidates_summary=None,
                latency_ms=1.0,
            )
        records = list(read_records(log_path))
        assert len(records) == 4
        repair = records[2]
        assert isinstance(repair, RepairRecord)
        assert repair.truncated_bytes == len(torn)
        assert repair.truncated_sha256 == hashlib.sha256(torn).hexdigest()
        assert repair.prev_hash == written[-1]["hash"]
        assert after["prev_hash"] == repair.hash
        report = verify_log(log_path)
        assert report.ok and report.records == 4

    def test_repair_of_a_file_that_is_only_a_torn_line(self, log_path):
        with open(log_path, "wb") as f:
            f.write(b'{"sch')
        with DecisionLog(log_path, repair=True):
            pass
        (line,) = read_lines(log_path)
        record = json.loads(line)
        assert record["kind"] == "repair" and record["prev_hash"] == GENESIS
        assert record["hash"] == independent_hash(record)

    def test_torn_tail_left_by_another_writer_is_caught_before_the_next_append(self, log_path):
        _write(log_path, 1)
        with DecisionLog(log_path) as log:
            with open(log_path, "ab") as f:
                f.write(b'{"half')  # another process died mid-write
            with pytest.raises(LogIntegrityError, match="torn tail"):
                log.record_verdict(
                    make_verdict(),
                    run_id="r",
                    step_id="q",
                    attempt=0,
                    candidates_summary=None,
                    latency_ms=1.0,
                )
        assert read_lines(log_path)[-1] == b'{"half'

    def test_an_edited_last_record_is_not_chained_onto(self, log_path):
        _write(log_path, 2)
        lines = read_lines(log_path)
        lines[-1] = lines[-1].replace(b'"attempt":1', b'"attempt":7')
        with open(log_path, "wb") as f:
            f.writelines(lines)
        with pytest.raises(LogIntegrityError) as info:
            DecisionLog(log_path)
        assert info.value.line == 2
        assert "does not match" in info.value.problem

    def test_a_garbage_last_line_is_not_chained_onto(self, log_path):
        _write(log_path, 1)
        with open(log_path, "ab") as f:
            f.write(b"not json\n")
        with pytest.raises(LogIntegrityError) as info:
            DecisionLog(log_path)
        assert info.value.line == 2 and "not valid JSON" in info.value.problem

    def test_a_reserialised_last_line_is_accepted_by_content(self, log_path):
        written = _write(log_path, 2)
        lines = read_lines(log_path)
        # Same content, another tool's layout (spaces, other key order).
        lines[-1] = (json.dumps(json.loads(lines[-1]), indent=None) + "\n").encode()
        with open(log_path, "wb") as f:
            f.writelines(lines)
        with DecisionLog(log_path) as log:
            assert log.head == written[-1]["hash"]

    def test_a_long_last_line_is_found_across_read_chunks(self, log_path):
        with DecisionLog(log_path) as log:
            log.record_verdict(
                make_verdict(),
                run_id="r",
                step_id="q",
                attempt=0,
                candidates_summary={"pad": "y" * 200_000},
                latency_ms=1.0,
            )
            head = log.head
        with DecisionLog(log_path) as log:
            assert log.head == head
