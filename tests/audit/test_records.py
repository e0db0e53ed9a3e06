"""Snapshot-style tests of the record shapes: which fields exist, with which JSON types."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic import ValidationError

from retryctl.audit import (
    SCHEMA_VERSION,
    DecisionLog,
    RepairRecord,
    SummaryRecord,
    VerdictRecord,
    parse_record,
)
from retryctl.controller import Action, Evidence, ManualClock, Verdict
from tests.audit.helpers import make_verdict

# Written out by hand from DESIGN.md and the issue, not read from the models.
VERDICT_SHAPE = {
    "schema": int,
    "kind": str,
    "ts": str,
    "run_id": str,
    "step_id": str,
    "attempt": int,
    "action": str,
    "reason": str,
    "confidence": float,
    "checked": bool,
    "answer": str,
    "target": type(None),
    "switch_to": type(None),
    "feedback": str,
    "retry_after_s": type(None),
    "signals": dict,
    "weights": dict,
    "thresholds": dict,
    "budget": dict,
    "breaker": dict,
    "error_class": str,
    "stopping": dict,
    "notes": list,
    "candidates_summary": dict,
    "latency_ms": float,
    "extra": dict,
    "prev_hash": str,
    "hash": str,
}
SUMMARY_SHAPE = {
    "schema": int,
    "kind": str,
    "ts": str,
    "run_id": str,
    "step_id": str,
    "final_answer": str,
    "sampling_history": list,
    "budget_used": dict,
    "budget_max": dict,
    "estimated_difficulty": float,
    "extra": dict,
    "prev_hash": str,
    "hash": str,
}


@pytest.fixture
def log_path(tmp_path):
    return str(tmp_path / "decisions.jsonl")


def _write_one_of_each(path: str) -> list[dict[str, Any]]:
    with DecisionLog(path, clock=ManualClock(1_700_000_000.25)) as log:
        log.record_verdict(
            make_verdict(feedback="agreement 0.80 < 0.90; check the last letters"),
            run_id="run-1",
            step_id="q-7",
            attempt=2,
            candidates_summary={"12": 3, "13": 2},
            latency_ms=41.5,
        )
        log.record_summary(
            run_id="run-1",
            step_id="q-7",
            final_answer="12",
            sampling_history=["12", "13", "12"],
            budget_used={"samples": 5},
            budget_max={"samples": 8, "usd": None},
            estimated_difficulty=0.4,
        )
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


class TestVerdictRecord:
    def test_line_has_exactly_the_documented_fields_with_json_types(self, log_path):
        verdict_line = _write_one_of_each(log_path)[0]
        assert set(verdict_line) == set(VERDICT_SHAPE)
        for key, kind in VERDICT_SHAPE.items():
            assert isinstance(verdict_line[key], kind), key

    def test_every_part_of_the_evidence_is_kept(self, log_path):
        line = _write_one_of_each(log_path)[0]
        assert line["schema"] == SCHEMA_VERSION == 1
        assert line["kind"] == "verdict"
        assert line["action"] == "refine"
        assert line["signals"] == {"agreement": 0.8, "token_confidence": 0.7}
        assert line["weights"] == {"agreement": 0.6, "token_confidence": 0.4}
        assert line["thresholds"] == {"confidence": 0.9}
        assert line["budget"] == {
            "used": {"samples": 5.0, "usd": 0.002},
            "limit": {"samples": 8.0, "usd": None},
            "scope": "run",
            "charged": {"samples": 2.0, "usd": 0.001},
        }
        assert line["breaker"] == {"gpt": "closed", "calc": "half_open"}
        assert line["error_class"] == "semantic"
        # A tuple inside the stopping evidence becomes a JSON list.
        assert line["stopping"] == {
            "stop": False,
            "confidence": 0.74,
            "rule": "ac-beta",
            "window": [1, 2],
        }
        assert line["notes"] == ["verifier timed out; fused without it"]
        assert line["attempt"] == 2 and line["latency_ms"] == 41.5
        assert line["candidates_summary"] == {"12": 3, "13": 2}

    def test_an_unchecked_verdict_is_written_as_such(self, log_path):
        with DecisionLog(log_path) as log:
            unchecked = Verdict(action=Action.ACCEPT, reason="accepted unchecked: ...", checked=False)
            log.record_verdict(
                unchecked, run_id="r", step_id="s", attempt=1, candidates_summary=None, latency_ms=0.0
            )
        with open(log_path, encoding="utf-8") as f:
            line = json.loads(f.readline())
        assert (line["checked"], line["confidence"]) == (False, None)
        record = parse_record(line)
        assert isinstance(record, VerdictRecord) and record.checked is False

    def test_a_record_written_before_the_checked_field_reads_as_checked(self, log_path):
        line = _write_one_of_each(log_path)[0]
        del line["checked"]  # as every record written before the field existed
        record = parse_record(line)
        assert isinstance(record, VerdictRecord) and record.checked is True
        assert record.confidence == line["confidence"]

    def test_timestamp_comes_from_the_injected_clock_in_iso_utc(self, log_path):
        line = _write_one_of_each(log_path)[0]
        # 1_700_000_000 s after the epoch is 2023-11-14 22:13:20 UTC.
        assert line["ts"] == "2023-11-14T22:13:20.250000Z"

    def test_no_field_of_a_verdict_or_its_evidence_is_left_out(self, log_path):
        # If Evidence or Verdict grows a field, this fails until the record keeps it too.
        evidence_to_record = {
            "signals": ("signals",),
            "weights": ("weights",),
            "thresholds": ("thresholds",),
            "budget_used": ("budget", "used"),
            "budget_limit": ("budget", "limit"),
            "budget_scope": ("budget", "scope"),
            "budget_charged": ("budget", "charged"),
            "breakers": ("breaker",),
            "error_class": ("error_class",),
            "stopping": ("stopping",),
            "notes": ("notes",),
        }
        assert set(Evidence.model_fields) == set(evidence_to_record)
        assert set(Verdict.model_fields) - {"evidence"} <= set(VERDICT_SHAPE)
        line = _write_one_of_each(log_path)[0]
        for path in evidence_to_record.values():
            value = line
            for key in path:
                value = value[key]
            assert value not in (None, {}, []), path

    def test_reads_back_as_the_typed_model(self, log_path):
        line = _write_one_of_each(log_path)[0]
        record = parse_record(line)
        assert isinstance(record, VerdictRecord)
        assert record.action is Action.REFINE
        assert record.budget.limit == {"samples": 8.0, "usd": None}
        assert record.schema_version == 1

    @pytest.mark.parametrize(
        ("field", "value"),
        [("attempt", -1), ("latency_ms", -3.0), ("latency_ms", math.nan), ("run_id", "")],
    )
    def test_invalid_value_is_refused_naming_the_field(self, log_path, field, value):
        kwargs: dict[str, Any] = {
            "run_id": "r",
            "step_id": "s",
            "attempt": 0,
            "candidates_summary": None,
            "latency_ms": 1.0,
        }
        kwargs[field] = value
        with DecisionLog(log_path) as log, pytest.raises(ValidationError) as info:
            log.record_verdict(make_verdict(), **kwargs)
        assert field in str(info.value)
        with open(log_path, "rb") as f:
            assert f.read() == b""


class TestSummaryRecord:
    def test_line_has_exactly_the_documented_fields_with_json_types(self, log_path):
        summary_line = _write_one_of_each(log_path)[1]
        assert set(summary_line) == set(SUMMARY_SHAPE)
        for key, kind in SUMMARY_SHAPE.items():
            assert isinstance(summary_line[key], kind), key
        assert summary_line["kind"] == "summary"
        assert summary_line["budget_max"] == {"samples": 8.0, "usd": None}

    def test_reads_back_as_the_typed_model(self, log_path):
        record = parse_record(_write_one_of_each(log_path)[1])
        assert isinstance(record, SummaryRecord)
        assert record.sampling_history == ["12", "13", "12"]


class TestParseRecord:
    def test_unknown_kind_is_refused(self):
        with pytest.raises(ValidationError):
            parse_record({"schema": 1, "kind": "mystery", "ts": "x"})

    def test_repair_record_shape(self):
        record = parse_record(
            {
                "schema": 1,
                "kind": "repair",
                "ts": "2026-01-01T00:00:00Z",
                "truncated_bytes": 5,
                "truncated_sha256": "a" * 64,
                "prev_hash": "0" * 64,
                "hash": "b" * 64,
            }
        )
        assert isinstance(record, RepairRecord)

    def test_hash_must_be_64_hex_digits(self):
        with pytest.raises(ValidationError) as info:
            parse_record(
                {
                    "schema": 1,
                    "kind": "repair",
                    "ts": "t",
                    "truncated_bytes": 1,
                    "truncated_sha256": "a" * 64,
                    "prev_hash": "0" * 64,
                    "hash": "xyz",
                }
            )
        assert "hash" in str(info.value)
