"""verify_log and read_records: every kind of damage is found, and the first bad record is named."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import retryctl.audit._reader as reader_module
from retryctl.audit import DecisionLog, SummaryRecord, VerdictRecord, check_chain, read_records, verify_log
from retryctl.controller import Action
from retryctl.exceptions import LogIntegrityError
from tests.audit.helpers import GENESIS, independent_hash, make_verdict, read_lines

N_BASE = 10


def _write_base(path: str) -> None:
    with DecisionLog(path) as log:
        for i in range(N_BASE - 1):
            log.record_verdict(
                make_verdict(reason=f"reason {i}"),
                run_id=f"run-{i % 3}",
                step_id=f"q{i}",
                attempt=i,
                candidates_summary={"n": i},
                latency_ms=float(i),
            )
        log.record_summary(
            run_id="run-0",
            step_id="q0",
            final_answer="12",
            sampling_history=["12", "12"],
            budget_used={"samples": 2},
            budget_max={"samples": 8},
        )


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[list[bytes], str]:
    path = str(tmp_path_factory.mktemp("base") / "base.jsonl")
    _write_base(path)
    lines = read_lines(path)
    return lines, json.loads(lines[-1])["hash"]


def _verify_lines(lines: list[bytes], **kwargs: Any):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "log.jsonl")
        with open(path, "wb") as f:
            f.writelines(lines)
        return verify_log(path, **kwargs)


def _first_difference(original: list[bytes], mutated: list[bytes]) -> int:
    """The oracle: records are all distinct, so the first bad one is the first that moved."""
    for i, (a, b) in enumerate(zip(original, mutated, strict=False)):
        if a != b:
            return i
    return min(len(original), len(mutated))


def _edit_json(line: bytes, key: str) -> bytes:
    obj = json.loads(line)
    old = obj.get(key)
    obj[key] = (old + 1) if isinstance(old, int | float) else f"{old}!"
    return (json.dumps(obj) + "\n").encode()  # another layout; hash left as it was


def _edit_bytes(line: bytes) -> bytes:
    # Same layout, one value changed in place: exercises the byte-level fast path.
    at = line.index(b'"step_id":"q') + len(b'"step_id":"q')
    return line[:at] + b"Z" + line[at:]


mutations = st.one_of(
    st.tuples(
        st.just("edit"),
        st.integers(0, N_BASE - 1),
        st.sampled_from(["reason", "attempt", "latency_ms", "run_id", "ts", "prev_hash", "hash"]),
    ),
    st.tuples(st.just("edit_bytes"), st.integers(0, N_BASE - 1), st.just("")),
    st.tuples(st.just("drop"), st.integers(0, N_BASE - 1), st.just("")),
    st.tuples(st.just("duplicate"), st.integers(0, N_BASE - 1), st.integers(0, N_BASE)),
    st.tuples(st.just("reorder"), st.permutations(range(N_BASE)), st.just("")),
)


def _apply(lines: list[bytes], mutation: tuple[str, Any, Any]) -> list[bytes]:
    kind, a, b = mutation
    out = list(lines)
    if kind == "edit":
        out[a] = _edit_json(out[a], b)
    elif kind == "edit_bytes":
        out[a] = _edit_bytes(out[a])
    elif kind == "drop":
        del out[a]
    elif kind == "duplicate":
        out.insert(b, lines[a])
    else:
        out = [lines[i] for i in a]
    return out


class TestVerifyLog:
    def test_intact_log_reports_records_runs_and_head(self, base):
        lines, head = base
        report = _verify_lines(lines)
        assert report.ok and report.error is None
        assert report.records == N_BASE and report.runs == 3 and report.head == head
        report.raise_for_error()

    def test_printed_report_says_what_was_verified(self, base):
        lines, _ = base
        report = _verify_lines(lines)
        assert str(report) == f"{report.path}: ok, {N_BASE} records in 3 runs"
        one = _verify_lines(lines[:1])
        assert str(one) == f"{one.path}: ok, 1 record in 1 run"
        broken = _verify_lines([lines[1], *lines[2:]])
        assert str(broken) == f"BROKEN: {broken.error}" and "record 0" in str(broken)

    def test_empty_log_is_intact(self):
        report = _verify_lines([])
        assert report.ok and report.records == 0 and report.runs == 0 and report.head == GENESIS

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(mutation=mutations)
    def test_any_edit_drop_reorder_or_duplicate_is_caught_at_the_first_bad_record(self, base, mutation):
        lines, head = base
        mutated = _apply(lines, mutation)
        if mutated == lines:
            return  # the identity permutation changes nothing
        expected = _first_difference(lines, mutated)
        report = _verify_lines(mutated, anchor=head)
        assert not report.ok
        assert report.error is not None
        assert report.error.index == expected and report.error.line == expected + 1
        assert report.records == expected
        problem = report.error.problem
        if mutation[0].startswith("edit"):
            assert "hash mismatch" in problem or "no valid 'hash'" in problem
        elif expected == len(mutated):
            assert "anchor" in problem
        else:
            assert "prev_hash mismatch" in problem

    def test_dropping_the_last_record_needs_the_anchor(self, base):
        lines, head = base
        assert _verify_lines(lines[:-1]).ok  # a shorter chain is still a chain
        report = _verify_lines(lines[:-1], anchor=head)
        assert not report.ok and report.error is not None
        assert report.error.index == N_BASE - 1 and "anchor" in report.error.problem

    def test_an_anchor_from_earlier_still_verifies_after_more_appends(self, base):
        lines, _ = base
        earlier = json.loads(lines[4])["hash"]
        assert _verify_lines(lines, anchor=earlier).ok

    def test_bad_json_is_named(self, base):
        lines, _ = base
        mutated = [*lines[:3], b'{"not": json\n', *lines[3:]]
        report = _verify_lines(mutated)
        assert report.error is not None and report.error.index == 3
        assert report.error.problem.startswith("bad JSON")

    def test_blank_line_is_named(self, base):
        lines, _ = base
        report = _verify_lines([*lines[:2], b"\n", *lines[2:]])
        assert report.error is not None and report.error.index == 2
        assert "empty line" in report.error.problem

    def test_unknown_schema_is_named_even_with_a_consistent_hash(self, base):
        lines, _ = base
        obj = json.loads(lines[5])
        obj["schema"] = 2
        obj["hash"] = independent_hash(obj)
        report = _verify_lines([*lines[:5], (json.dumps(obj) + "\n").encode()])
        assert report.error is not None and report.error.index == 5
        assert "unknown schema 2" in report.error.problem

    def test_torn_tail_is_named(self, base):
        lines, _ = base
        report = _verify_lines([*lines[:4], lines[4][:50]])
        assert report.error is not None and report.error.index == 4
        assert "torn tail" in report.error.problem
        with pytest.raises(LogIntegrityError, match="torn tail"):
            report.raise_for_error()

    def test_an_append_in_flight_is_not_a_torn_tail(self, base, tmp_path, monkeypatch):
        lines, head = base
        path = str(tmp_path / "live.jsonl")
        with open(path, "wb") as f:
            f.writelines(lines)
        settled = os.path.getsize(path)
        with open(path, "ab") as f:
            f.write(lines[0][:40])  # a writer's line, seen half-way
        # The race is fixed in place: the settled size is the one from before the append began.
        monkeypatch.setattr(reader_module, "settled_size", lambda _fd: settled)
        report = verify_log(path)
        assert report.ok and report.records == N_BASE and report.head == head
        assert len(list(read_records(path))) == N_BASE

    def test_a_reserialised_record_with_the_same_content_still_verifies(self, base):
        lines, _ = base
        mutated = list(lines)
        mutated[3] = (json.dumps(json.loads(lines[3]), indent=None) + "\n").encode()
        assert mutated[3] != lines[3]
        report = _verify_lines(mutated)
        assert report.ok and report.records == N_BASE


record_specs = st.lists(
    st.fixed_dictionaries(
        {
            "run_id": st.sampled_from(["a", "b", 'q"uote', "back\\slash", "ünï", "run_id"]),
            "reason": st.text(max_size=30),
            "extra": st.dictionaries(
                st.sampled_from(["run_id", "schema", "prev_hash", "hash", "note"]),
                st.one_of(st.text(max_size=8), st.integers(), st.none()),
                max_size=3,
            ),
            "summary": st.booleans(),
        }
    ),
    min_size=1,
    max_size=8,
)


class TestWriterReaderRoundTrip:
    @settings(max_examples=100, deadline=None)
    @given(specs=record_specs)
    def test_any_content_writes_a_chain_that_verifies(self, specs):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "log.jsonl")
            with DecisionLog(path) as log:
                for i, spec in enumerate(specs):
                    if spec["summary"]:
                        log.record_summary(
                            run_id=spec["run_id"],
                            step_id=f"q{i}",
                            final_answer=spec["reason"],
                            sampling_history=[spec["extra"]],
                            budget_used={"samples": 1},
                            budget_max={"samples": None},
                            extra=spec["extra"],
                        )
                    else:
                        log.record_verdict(
                            make_verdict(reason=spec["reason"], action=Action.ACCEPT),
                            run_id=spec["run_id"],
                            step_id=f"q{i}",
                            attempt=i,
                            candidates_summary=spec["extra"],
                            latency_ms=0.0,
                            extra=spec["extra"],
                        )
            report = verify_log(path)
            assert report.ok, report.error
            assert report.records == len(specs)
            assert report.runs == len({s["run_id"] for s in specs})
            previous = GENESIS
            for line in read_lines(path):
                record = json.loads(line)
                assert record["hash"] == independent_hash(record)
                assert record["prev_hash"] == previous
                previous = record["hash"]
            assert report.head == previous
            records = list(read_records(path))
            assert [r.run_id for r in records] == [s["run_id"] for s in specs]  # type: ignore[union-attr]
            for record, spec in zip(records, specs, strict=True):
                assert isinstance(record, SummaryRecord if spec["summary"] else VerdictRecord)


class TestReadRecords:
    def test_bad_json_raises_naming_the_line(self, base, tmp_path):
        lines, _ = base
        path = str(tmp_path / "log.jsonl")
        with open(path, "wb") as f:
            f.writelines([*lines[:2], b"{oops\n"])
        records = read_records(path)
        assert isinstance(next(records), VerdictRecord)
        next(records)
        with pytest.raises(LogIntegrityError) as info:
            next(records)
        assert info.value.line == 3 and "bad JSON" in info.value.problem

    def test_unknown_schema_raises(self, tmp_path):
        path = str(tmp_path / "log.jsonl")
        with open(path, "w") as f:
            f.write('{"schema": 9, "kind": "verdict"}\n')
        with pytest.raises(LogIntegrityError, match="unknown schema 9"):
            list(read_records(path))

    def test_torn_tail_raises(self, base, tmp_path):
        lines, _ = base
        path = str(tmp_path / "log.jsonl")
        with open(path, "wb") as f:
            f.writelines([lines[0], lines[1][:30]])
        with pytest.raises(LogIntegrityError, match="torn tail") as info:
            list(read_records(path))
        assert info.value.index == 1


class TestCheckChain:
    """check_chain: verify_log's walk over lines a caller reads, resumable where it stopped."""

    def test_whole_log_in_one_walk_is_verify_logs_report(self, base: tuple[list[bytes], str]) -> None:
        lines, _ = base
        scan = check_chain(lines)
        report = _verify_lines(lines)
        assert scan.problem is None and report.ok
        assert (scan.records, scan.head, scan.runs) == (report.records, report.head, report.runs)

    @pytest.mark.parametrize("cut", [1, 4, N_BASE - 1])
    def test_resumed_in_batches_it_finds_the_same_first_problem(
        self, base: tuple[list[bytes], str], cut: int
    ) -> None:
        lines, _ = base
        bad = list(lines)
        bad[6] = _edit_json(bad[6], "reason")
        first = check_chain(bad[:cut])
        rest = check_chain(bad[cut:], after=first.head, index=first.records, run_keys=set(first.run_keys))
        whole = check_chain(bad)
        scan = rest if first.problem is None else first
        assert whole.problem is not None and "hash mismatch" in whole.problem
        assert (scan.problem, scan.records, scan.head) == (whole.problem, whole.records, whole.head)
        report = _verify_lines(bad)
        assert report.error is not None and report.error.problem == whole.problem
        assert report.records == whole.records == 6

    def test_a_walk_started_after_the_wrong_hash_names_the_link(self, base: tuple[list[bytes], str]) -> None:
        lines, _ = base
        scan = check_chain(lines[3:], after=GENESIS, index=3)
        assert scan.records == 3 and scan.problem is not None and "prev_hash mismatch" in scan.problem
        assert scan.head == GENESIS

    @pytest.mark.parametrize("damage", ["none", "edit", "sorted", "garbage", "torn"])
    def test_with_decoded_links_the_walk_is_the_same(
        self, base: tuple[list[bytes], str], damage: str
    ) -> None:
        import msgspec

        class Links(msgspec.Struct):
            prev_hash: Any = None
            schema: Any = None
            hash: Any = None
            run_id: str = ""

        lines, _ = base
        lines = list(lines)
        if damage == "edit":
            lines[5] = _edit_json(lines[5], "reason")
        elif damage == "sorted":  # another tool's layout: valid, settled by the exact walk
            lines[2] = (
                json.dumps(json.loads(lines[2]), sort_keys=True, separators=(",", ":")).encode() + b"\n"
            )
        elif damage == "garbage":
            lines[4] = b"not json\n"
        elif damage == "torn":
            lines[-1] = lines[-1][:40]
        decoded: list[Links | None] = []
        for line in lines:
            try:
                decoded.append(msgspec.json.decode(line, type=Links))
            except msgspec.DecodeError:
                decoded.append(None)
        plain = check_chain(lines)
        assert check_chain(lines, decoded=decoded) == plain
        assert (plain.problem is None) == (damage in ("none", "sorted"))
