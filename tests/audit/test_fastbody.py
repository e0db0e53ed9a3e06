"""The verdict fast path: the same bytes, the same record and the same errors as the full pipeline."""

from __future__ import annotations

import datetime
import enum
import itertools
import math
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.processors import TimeStamper

from retryctl.audit import DecisionLog, verify_log
from retryctl.audit._canonical import canonical_bytes
from retryctl.audit._fastbody import verdict_body
from retryctl.audit._verdict_line import VerdictLine, iso_utc, utc_now_iso
from retryctl.controller import Action, Evidence, Verdict
from tests.audit.helpers import make_verdict, read_lines


class _Tag(str):
    """A str subclass: the model keeps its text as a plain str."""


class _Level(enum.IntEnum):
    LOW = 1


class _Mode(enum.Enum):
    FAST = "fast"


class _Counter:
    """A clock that moves on every reading, so that a path reading it twice would show in ``ts``."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def __call__(self) -> float:
        return 1_700_000_000.0 + next(self._ticks) * 0.125


def _same(_logger: object, _name: str, event_dict: Any) -> Any:
    """A processor that changes nothing: its presence alone sends every record through the pipeline."""
    return event_dict


_LONE = st.sampled_from(["\ud800", "a\udfffb", "\udc00\ud800"])
_TEXT = st.one_of(st.text(max_size=12), st.text(st.characters(codec="utf-8"), max_size=4), _LONE)
_KEY = st.one_of(st.text(max_size=8), _LONE)
_FLOAT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-05, 1e-7, 1.5e16, 1e300, 0.1, 12.25]),
)
_ODD = st.sampled_from([_Tag("tag"), _Level.LOW, _Mode.FAST, Action.ACCEPT, b"bytes", 2**70, 10**19])
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), _FLOAT, _TEXT)
_JSON = st.recursive(
    st.one_of(_SCALAR, _ODD),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(_KEY, inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.integers(), inner, max_size=2),
    ),
    max_leaves=12,
)
# Mostly plain JSON, so that most examples take the fast path; sometimes anything at all.
_VALUE = st.one_of(
    st.recursive(
        _SCALAR,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=12,
    ),
    _JSON,
)
_FLOATS = st.dictionaries(st.text(max_size=8), _FLOAT, max_size=3)
_PLAIN_FLOATS = st.dictionaries(st.text(max_size=8), st.floats(-1e6, 1e6), max_size=3)


@st.composite
def _verdicts(draw: st.DrawFn) -> Verdict:
    evidence = Evidence(
        signals=draw(st.one_of(_PLAIN_FLOATS, _FLOATS)),
        weights=draw(_PLAIN_FLOATS),
        thresholds=draw(st.one_of(_PLAIN_FLOATS, _FLOATS)),
        budget_used=draw(
            st.dictionaries(st.text(max_size=8), st.integers(0, 100) | st.floats(0, 1e3), max_size=3)
        ),
        budget_limit=draw(st.dictionaries(st.text(max_size=8), st.none() | st.floats(0, 1e3), max_size=3)),
        budget_scope=draw(st.sampled_from([None, "step", "run"])),
        budget_charged=draw(
            st.dictionaries(st.text(max_size=8), st.integers(0, 100) | st.floats(0, 1e3), max_size=3)
        ),
        breakers=draw(st.dictionaries(st.text(max_size=8), st.sampled_from(["closed", "open", "half_open"]))),
        error_class=draw(st.none() | st.text(max_size=10)),
        stopping=draw(st.dictionaries(st.text(max_size=8), _VALUE, max_size=4)),
        notes=draw(st.lists(st.text(max_size=20), max_size=3)),
    )
    return Verdict(
        action=draw(st.sampled_from(list(Action))),
        reason=draw(st.text(max_size=30)),
        confidence=draw(st.none() | st.floats(0.0, 1.0)),
        checked=draw(st.booleans()),
        answer=draw(st.none() | st.text(max_size=10)),
        switch_to=draw(st.none() | st.text(max_size=10)),
        feedback=draw(st.none() | st.text(max_size=10)),
        retry_after_s=draw(st.none() | st.floats(0.0, 60.0)),
        evidence=evidence,
    )


_CALLS = st.fixed_dictionaries(
    {
        "run_id": st.one_of(st.just("run-1"), _TEXT, st.just(_Tag("run-2"))),
        "step_id": st.one_of(st.just("solve"), _TEXT),
        "attempt": st.one_of(st.integers(0, 9), st.integers(), st.booleans(), st.just(2**64)),
        "candidates_summary": _VALUE,
        "latency_ms": st.one_of(st.floats(0, 1e5), _FLOAT, st.integers(-2, 2**60), st.booleans()),
        "target": st.one_of(st.none(), _TEXT),
        "extra": st.one_of(st.none(), st.dictionaries(st.text(max_size=8), _VALUE, max_size=4), _VALUE),
    }
)


def _typed(value: Any) -> Any:
    """``value`` with every scalar's type shown, so that ``1 == 1.0 == True`` cannot hide a difference."""
    if isinstance(value, dict):
        return {(type(k).__name__, k): _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def _write(path: Path, verdict: Verdict, call: dict[str, Any], *, pipeline: bool) -> tuple[Any, list[bytes]]:
    """Append one record, as the fast path or the full pipeline writes it; what it returned or raised."""
    processors = (_same,) if pipeline else ()
    with DecisionLog(path, clock=_Counter(), processors=processors) as log:
        log.record_verdict(
            make_verdict(), run_id="before", step_id="s", attempt=0, candidates_summary=None, latency_ms=1.0
        )
        try:
            record = log.record_verdict(verdict, **call)
            outcome: Any = ("written", list(record), _typed(record))
        except Exception as exc:  # the very error, compared below
            outcome = ("raised", type(exc), str(exc))
        log.record_verdict(
            make_verdict(), run_id="after", step_id="s", attempt=0, candidates_summary=None, latency_ms=1.0
        )
    return outcome, read_lines(str(path))


def _appended(
    path: Path, verdict: Verdict, call: dict[str, Any], *, pipeline: bool, times: int = 3
) -> tuple[list[Any], list[bytes]]:
    """Log ``verdict`` ``times`` times between other records: with ``append_verdict`` (its first
    record takes the one-off way, the second makes its line, the third fills the line in) or, for
    the pipeline, ``record_verdict`` with a processor; what each returned or raised, and the lines."""
    processors = (_same,) if pipeline else ()
    outcomes: list[Any] = []
    with DecisionLog(path, clock=_Counter(), processors=processors) as log:
        for i in range(times):
            log.record_verdict(
                make_verdict(),
                run_id=f"r{i}",
                step_id="s",
                attempt=0,
                candidates_summary=None,
                latency_ms=1.0,
            )
            try:
                if pipeline:
                    log.record_verdict(verdict, **call)
                else:
                    log.append_verdict(verdict, **call)
                outcomes.append("written")
            except Exception as exc:  # the very error, compared below
                outcomes.append(("raised", type(exc), str(exc)))
    return outcomes, read_lines(str(path))


_PLAIN_CALL: dict[str, Any] = {
    "run_id": "run-1",
    "step_id": "tool:noop:call-1",
    "attempt": 1,
    "candidates_summary": {"tool": "noop", "args": {}},
    "latency_ms": 0.25,
    "target": "noop",
    "extra": None,
}


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


class TestVerdictBody:
    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(verdict=_verdicts(), call=_CALLS)
    def test_the_fast_path_writes_the_pipelines_bytes_or_leaves_it_the_record(self, tmp_path, verdict, call):
        fast_path = tmp_path / "fast.jsonl"
        full_path = tmp_path / "full.jsonl"
        for path in (fast_path, full_path):
            path.unlink(missing_ok=True)
        fast = _write(fast_path, verdict, call, pipeline=False)
        full = _write(full_path, verdict, call, pipeline=True)
        assert fast == full
        assert verify_log(str(fast_path)).ok

    def test_a_plain_verdict_takes_the_fast_path(self):
        body = verdict_body(
            make_verdict(),
            run_id="run-1",
            step_id="solve",
            attempt=2,
            candidates_summary={"answers": {"12": 2}, "scores": [0.5, 1e-07]},
            latency_ms=3,
            target="gpt",
            extra={"question": "6 × 2?", "gold": None, "ok": True},
        )
        assert body is not None
        assert body["latency_ms"] == 3.0 and type(body["latency_ms"]) is float
        assert body["stopping"]["window"] == [1, 2]  # the verdict's tuple, as its JSON dump gives it
        assert body["budget"] == {
            "used": {"samples": 5.0, "usd": 0.002},
            "limit": {"samples": 8.0, "usd": None},
            "scope": "run",
            "charged": {"samples": 2.0, "usd": 0.001},
        }

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("run_id", _Tag("run")),
            ("run_id", ""),
            ("attempt", True),
            ("attempt", -1),
            ("latency_ms", math.nan),
            ("latency_ms", -0.5),
            ("latency_ms", math.inf),
            ("target", "\ud800"),
            ("extra", {"k": (1, 2)}),
            ("extra", {"k": math.inf}),
            ("extra", {"k": _Level.LOW}),
            ("extra", {"k": 2**64}),
            ("extra", {1: "one"}),
            ("extra", ["not", "a", "dict"]),
            ("candidates_summary", {"k": "\udfff"}),
            ("candidates_summary", _nested(40)),
        ],
    )
    def test_what_the_model_would_change_or_refuse_is_left_to_it(self, field, value):
        call: dict[str, Any] = {
            "run_id": "run-1",
            "step_id": "solve",
            "attempt": 2,
            "candidates_summary": None,
            "latency_ms": 3.0,
            "target": None,
            "extra": None,
        }
        call[field] = value
        assert verdict_body(make_verdict(), **call) is None

    @pytest.mark.parametrize(
        "verdict",
        [
            Verdict.model_construct(action="accept", reason="a str, not an Action"),
            Verdict.model_construct(action=Action.ACCEPT, reason="unvalidated", confidence=math.nan),
            Verdict.model_construct(action=Action.ACCEPT, reason="unvalidated", confidence=1),
            Verdict.model_construct(action=Action.STOP),
            Verdict.model_construct(
                action=Action.STOP, reason="x", evidence=Evidence.model_construct(signals={"a": "high"})
            ),
            make_verdict(evidence=Evidence(stopping={"window": (1, (2, 3)), "when": _Mode.FAST})),
            make_verdict(evidence=Evidence(stopping={"window": (1, (2, 3.5)), "tag": _Tag("t")})),
        ],
    )
    @pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # the pipeline's dump, as ever
    def test_a_verdict_built_without_validation_is_written_as_the_pipeline_writes_it(self, tmp_path, verdict):
        call = {
            "run_id": "r",
            "step_id": "s",
            "attempt": 0,
            "candidates_summary": None,
            "latency_ms": 1.0,
            "target": None,
            "extra": None,
        }
        fast = _write(tmp_path / "fast.jsonl", verdict, call, pipeline=False)
        full = _write(tmp_path / "full.jsonl", verdict, call, pipeline=True)
        assert fast == full

    def test_a_non_finite_signal_is_left_to_the_model(self):
        verdict = make_verdict(evidence=Evidence(signals={"agreement": math.nan}))
        assert (
            verdict_body(
                verdict,
                run_id="r",
                step_id="s",
                attempt=0,
                candidates_summary=None,
                latency_ms=1.0,
                target=None,
                extra=None,
            )
            is None
        )


class TestAppendVerdict:
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(verdict=_verdicts(), call=_CALLS)
    def test_the_same_bytes_and_errors_as_the_pipeline_every_time_a_verdict_is_logged(
        self, tmp_path, verdict, call
    ):
        fast_path, full_path = tmp_path / "fast.jsonl", tmp_path / "full.jsonl"
        for path in (fast_path, full_path):
            path.unlink(missing_ok=True)
        fast = _appended(fast_path, verdict, call, pipeline=False)
        full = _appended(full_path, verdict, call, pipeline=True)
        assert fast == full
        assert verify_log(str(fast_path)).ok

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("candidates_summary", {"tool": "noop", "args": {"x": 1e-05, "y": [2.5, 1e16]}}),
            ("candidates_summary", {"tool": "noop", "args": {"prev_hash": "nested key"}}),
            ("candidates_summary", {"tool": "noop", "args": {"k": (1, 2)}}),
            ("candidates_summary", {"tool": "noop", "args": {"k": math.nan}}),
            ("candidates_summary", {"tool": "noop", "args": {1: "int key"}}),
            ("candidates_summary", _nested(40)),
            ("latency_ms", 1e-07),
            ("latency_ms", 3),
            ("latency_ms", -1.0),
            ("step_id", "\ud800"),
            ("target", None),
            ("extra", {"decided_by": "user", "reply": {"action": "accept"}}),
        ],
    )
    def test_a_repeated_verdict_fills_its_line_as_the_pipeline_writes_the_record(
        self, tmp_path, field, value
    ):
        call = {**_PLAIN_CALL, field: value}
        verdict = make_verdict()
        fast = _appended(tmp_path / "fast.jsonl", verdict, call, pipeline=False, times=4)
        full = _appended(tmp_path / "full.jsonl", verdict, call, pipeline=True, times=4)
        assert fast == full

    def test_a_verdict_changed_after_its_line_was_made_is_written_as_it_is_now(self, tmp_path):
        verdict = make_verdict()
        fast_path, full_path = tmp_path / "fast.jsonl", tmp_path / "full.jsonl"
        with (
            DecisionLog(fast_path, clock=_Counter()) as fast,
            DecisionLog(full_path, clock=_Counter(), processors=(_same,)) as full,
        ):
            for step in range(4):
                if step == 3:  # frozen, but its evidence holds dicts
                    verdict.evidence.notes.append("added later")
                    verdict.evidence.signals["agreement"] = 0.5
                fast.append_verdict(verdict, **_PLAIN_CALL)
                full.record_verdict(verdict, **_PLAIN_CALL)
        assert fast_path.read_bytes() == full_path.read_bytes()
        assert b"added later" in read_lines(str(fast_path))[-1]


class TestVerdictLine:
    def test_a_plain_verdict_has_a_line_whose_parts_make_the_records_bytes(self):
        verdict = make_verdict(evidence=Evidence(signals={"validators": 1.0}, weights={"validators": 1.0}))
        line = VerdictLine.of(verdict)
        assert line is not None and line.matches(verdict)
        parts = line.fill(lambda: "2026-01-01T00:00:00Z", **_PLAIN_CALL)
        assert parts is not None
        before, after = parts
        assert before.endswith(b'"prev_hash":"') and after.startswith(b'","reason":')
        body = verdict_body(verdict, **_PLAIN_CALL)
        assert body is not None
        body.update(ts="2026-01-01T00:00:00Z", prev_hash="ab" * 32)
        assert before + b"ab" * 32 + after == canonical_bytes(body)

    def test_a_verdict_whose_text_holds_a_hole_has_no_line(self):
        assert VerdictLine.of(make_verdict(reason="\x00retryctl:run_id\x00")) is None

    def test_an_equal_verdict_matches_and_a_changed_one_does_not(self):
        verdict = make_verdict()
        line = VerdictLine.of(verdict)
        assert line is not None
        assert line.matches(make_verdict())  # equal, not the same object
        assert not line.matches(make_verdict(reason="another"))
        verdict.evidence.budget_used["samples"] = 6.0
        assert not line.matches(verdict)


class TestIsoUtc:
    @given(ns=st.integers(0, 2**62), whole=st.booleans())
    def test_the_text_of_structlogs_iso_utc_stamper_for_the_same_instant(self, ns, whole):
        if whole:
            ns -= ns % 1_000_000_000  # no fraction: isoformat leaves it out
        seconds, micros = divmod(ns // 1000, 1_000_000)
        moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).replace(microsecond=micros)
        assert iso_utc(ns) == moment.isoformat().replace("+00:00", "Z")

    def test_now_reads_the_clock_as_structlogs_stamper_does(self):
        stamper = TimeStamper(fmt="iso", utc=True, key="ts")
        texts = [stamper(None, "x", {})["ts"], utc_now_iso(), stamper(None, "x", {})["ts"]]
        before, now, after = (datetime.datetime.fromisoformat(t.replace("Z", "+00:00")) for t in texts)
        assert before <= now <= after
        assert texts[1].endswith("Z") and len(texts[1]) in (
            len("2026-01-01T00:00:00Z"),
            len("2026-01-01T00:00:00.000001Z"),
        )
        assert abs(now.timestamp() - time.time()) < 5
