"""ChainSink: torn tails, repair, and what it refuses to chain onto."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retryctl.audit import ChainSink, DecisionLog, RepairRecord, read_records, verify_log
from retryctl.audit._canonical import canonical_bytes, encode_line
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

    def test_a_line_given_around_the_head_is_the_line_msg_writes(self, tmp_path):
        def body(i: int) -> dict[str, Any]:
            return {"schema": 1, "kind": "verdict", "run_id": f"r{i}", "ts": "t", "n": i}

        whole, around = (
            ChainSink(str(tmp_path / "a"), now=lambda: "t"),
            ChainSink(str(tmp_path / "b"), now=lambda: "t"),
        )
        for i in range(3):
            record = whole.msg(body(i), validated=True)
            raw = canonical_bytes({**body(i), "prev_hash": "\x00"})
            before, after = raw.split(b'"\\u0000"')
            assert around.msg_around_head(before + b'"', b'"' + after) == record["hash"] == around.head
        whole.close()
        around.close()
        assert read_lines(str(tmp_path / "a")) == read_lines(str(tmp_path / "b"))
        assert verify_log(str(tmp_path / "b")).ok
        around.close()
        with pytest.raises(ValueError, match="closed"):
            around.msg_around_head(b"{", b"}")

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


# -- the fast encoder writes exactly json.dumps's bytes -----------------------------------------------

# Floats where orjson and repr part ways (exponents, 0.0000..., >= 1e16) and ordinary ones.
_FLOATS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e-3, max_value=1e-3, allow_nan=False),
    st.floats(min_value=1e15, max_value=1e18),
    st.floats(min_value=-1e-3, max_value=1e-3).map(lambda x: round(x, 9)),
    st.integers(-(10**20), 10**20).map(lambda n: n / 1000),
    st.sampled_from([0.0, -0.0, 1e-4, 1e-5, 9.99e-5, 1e16, 9999999999999998.0, 0.1 + 0.2, 5e-324]),
)
_TEXT = st.text(st.characters(codec="utf-8"))  # no lone surrogates: they are tested on their own
_KEYS = st.one_of(_TEXT, st.sampled_from(["prev_hash", "schema", "run_id", "hash", "e", "0e-5"]))
_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        _FLOATS,
        _TEXT,
        # Number-like bytes inside strings: the fast encoder must not take them for floats, nor miss one.
        st.sampled_from(["1e-05", ":0.00001", "9e71-42c8", "a:12e5", "[1E7", ",-0.00001"]),
    ),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=24,
)
_HEX = st.text("0123456789abcdef", min_size=64, max_size=64)


def _body(fields: dict[str, Any], prev_hash: str) -> dict[str, Any]:
    body = {"schema": 1, "kind": "verdict", "run_id": "r", **fields, "prev_hash": prev_hash}
    body.pop("hash", None)
    return body


class TestFastEncoder:
    @settings(max_examples=600, deadline=None)
    @given(st.dictionaries(_KEYS, _JSON, max_size=8), _HEX)
    def test_the_line_and_hash_are_byte_identical_to_json_dumps(self, fields, prev_hash):
        body = _body(fields, prev_hash)
        assert encode_line(body, validated=True) == encode_line(body)
        assert encode_line(body)[1] == hashlib.sha256(canonical_bytes(body)).hexdigest()

    @settings(max_examples=1500, deadline=None)
    @given(_FLOATS, _HEX)
    def test_every_float_is_spelt_as_repr(self, value, prev_hash):
        body = _body({"x": value, "xs": [value, -value], "d": {"v": value}}, prev_hash)
        line, _ = encode_line(body, validated=True)
        assert line == encode_line(body)[0]
        assert repr(value).encode() in line

    def test_a_lone_surrogate_still_raises_unicode_encode_error(self):
        # The writer turns exactly this error into a ConfigError naming the field.
        with pytest.raises(UnicodeEncodeError):
            encode_line(_body({"reason": "bad \ud800"}, "0" * 64), validated=True)

    @pytest.mark.parametrize("value", [2**64, -(2**70), {1: "int key"}, ("a", 1)])
    def test_what_orjson_refuses_or_changes_is_left_to_json_dumps(self, value):
        body = _body({"v": value}, "0" * 64)
        assert encode_line(body, validated=True) == encode_line(body)

    def test_unvalidated_bodies_keep_json_dumps_refusing_nan(self):
        with pytest.raises(ValueError, match="Out of range float"):
            encode_line(_body({"v": math.nan}, "0" * 64))

    @pytest.mark.parametrize(
        ("fields", "fast"),
        [
            ({"run_id": "09c99e71-42c8-4390-8191-fd8726aa0627", "step_id": "tool:f:call_3E9"}, True),
            ({"reason": "took 1e-05 s", "answer": "0.00001"}, True),
            ({"latency_ms": 1e-05}, False),
            ({"signals": {"a": 0.5, "b": 1e16}}, False),
            ({"notes": [], "xs": [2, -1e-07]}, False),
        ],
    )
    def test_only_a_float_in_a_number_takes_the_slow_path(self, fields, fast, monkeypatch):
        # Exponent-like bytes in a string (a uuid's "9e", a call id's "3E") are not floats.
        from retryctl.audit import _canonical

        slow: list[Any] = []
        real = _canonical.canonical_bytes

        def counted(obj: dict[str, Any]) -> bytes:
            slow.append(obj)
            return real(obj)

        monkeypatch.setattr(_canonical, "canonical_bytes", counted)
        body = {"schema": 1, "kind": "verdict", "run_id": "r", **fields, "prev_hash": "9e" * 32}
        line = encode_line(body, validated=True)
        monkeypatch.undo()
        assert (slow == []) is fast
        assert line == encode_line(body)

    def test_an_ordinary_record_takes_the_fast_path(self, log_path, monkeypatch):
        from retryctl.audit import _canonical

        slow: list[Any] = []

        def counted(obj: dict[str, Any]) -> bytes:
            slow.append(obj)
            return b""

        monkeypatch.setattr(_canonical, "canonical_bytes", counted)
        _write(log_path, 3)
        monkeypatch.undo()
        assert slow == []
        assert verify_log(log_path).ok
