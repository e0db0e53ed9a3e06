"""Totalling steps in halves and joining the totals gives every audit section, bit for bit.

The oracle is the one-pass implementation the totals replaced (``_summary_reference``). Steps are
generated with the values that make sums and rankings order-sensitive: floats whose sum depends on
the order of the additions, ``5`` next to ``5.0``, ties in spend, gold answers, thresholds. The
later half's totals also travel through msgpack, as they do between the audit's two processes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retryctl.report import Analysis, StepOutcome, analyse, summarise
from retryctl.report._summary import sections
from retryctl.report._totals import StepTotals
from tests.report._logs import graph_log, tool_log
from tests.report._summary_reference import reference_summarise

_NUMBERS = st.sampled_from([0, 0.0, 5, 5.0, 0.1, 0.2, 0.30000000000000004, 1e-9, 3, 12.5, 40.0, 1e16])
_REASONS = st.sampled_from(
    [
        "budget samples 40 of 40 spent",
        # One row per budget: the name after "budget" is kept, step names and figures are blanked.
        "step 'q0' budget 'usd' is spent (0.5 of 0.5)",
        "step 'q1' budget 'usd' is spent (0.25 of 0.25)",
        "step 'q1' budget 'samples' is spent (8 of 8)",
        "run budget 'output_tokens' would be exceeded: 90 estimated for this call + 90 spent > limit 100",
        "breaker 'gpt' open",
        "breaker 'calc' open",
        "needs the user: 2 < 3",
        "",
    ]
)


@st.composite
def _step(draw: st.DrawFn) -> StepOutcome:
    return StepOutcome(
        run_id=draw(st.sampled_from(["r0", "r1", "r2"])),
        step_id=draw(st.sampled_from(["q0", "q1", "tool:calc"])),
        verdicts=draw(st.integers(0, 4)),
        attempts=draw(st.sampled_from([0, 1, 2, 3.0])),
        samples=draw(_NUMBERS),
        usd=draw(st.one_of(st.just(0.0), _NUMBERS)),
        last_action=draw(st.sampled_from(["accept", "stop", "ask_user", "refine", None])),
        last_confidence=draw(st.sampled_from([None, 0.5, 0.81, 0.86, 0.89, 0.9, 0.95, 1])),
        last_reason=draw(_REASONS),
        threshold=draw(st.sampled_from([None, 0.9, 0.85, 1])),
        answer=draw(st.sampled_from([None, "12", "x", " X "])),
        gold=draw(st.sampled_from([None, "12", "12.0", "x"])),
    )


def _analysis(steps: list[StepOutcome]) -> Analysis:
    a = Analysis(paths=["log.jsonl"], records=3 * len(steps))
    a.steps = {(s.run_id, f"{s.step_id}#{i}"): s for i, s in enumerate(steps)}
    a.runs = {s.run_id for s in steps}
    a.target_samples.update({"m": 2.5, "calc": 1})
    a.target_attempts.update({"m": 3, "calc": 1, "(none)": 1})
    a.tools.add("calc")
    return a


def _exact(summary: dict[str, Any]) -> str:
    """The sections as JSON: ``5`` and ``5.0`` differ, and floats keep every bit."""
    return json.dumps(summary, sort_keys=False)


def _joined(a: Analysis, cut: int, *, over_the_wire: bool) -> dict[str, Any]:
    steps = list(a.steps.values())
    first, later = StepTotals.of(steps[:cut]), StepTotals.of(steps[cut:])
    if over_the_wire:
        later = msgspec.msgpack.decode(msgspec.msgpack.encode(later), type=StepTotals)
    first.extend(later)
    return sections(a, first)


@settings(max_examples=300, deadline=None)
@given(st.lists(_step(), max_size=40), st.data())
def test_halves_joined_give_what_one_pass_gives(steps: list[StepOutcome], data: st.DataObject) -> None:
    a = _analysis(steps)
    expected = _exact(reference_summarise(a))
    assert _exact(summarise(a)) == expected
    cut = data.draw(st.integers(0, len(steps)))
    assert _exact(_joined(a, cut, over_the_wire=data.draw(st.booleans()))) == expected


def test_a_sum_that_depends_on_the_order_is_taken_in_step_order() -> None:
    # 0.1 + 0.2 + 0.30000000000000004 differs from 0.30000000000000004 + (0.1 + 0.2) in the last bit:
    # summing each half first and adding the halves would give the wrong bits.
    values = [0.1, 0.2, 0.30000000000000004, 1e16, 1.0, 1.0]
    steps = [StepOutcome(f"r{i}", "q", samples=x, usd=x, last_action="stop") for i, x in enumerate(values)]
    a = _analysis(steps)
    for cut in range(len(steps) + 1):
        joined = _joined(a, cut, over_the_wire=True)
        assert joined["cost"]["total_usd"] == sum(values)
        assert _exact(joined) == _exact(reference_summarise(a))


def test_black_holes_rank_across_the_halves() -> None:
    # The second half's step outspends every step of the first half; ties keep step order.
    spends = [3.0, 7.0, 7.0, 1.0] * 5 + [9.0, 7.0]
    steps = [StepOutcome(f"r{i}", "q", samples=x, last_action="stop") for i, x in enumerate(spends)]
    a = _analysis(steps)
    joined = _joined(a, 20, over_the_wire=True)
    assert [h["run_id"] for h in joined["black_holes"]["top"]][:3] == ["r20", "r1", "r2"]
    assert _exact(joined) == _exact(reference_summarise(a))


@pytest.mark.parametrize("kind", ["graph", "tools"])
def test_real_logs_every_cut(tmp_path: Path, kind: str) -> None:
    log = (
        graph_log(tmp_path / "g.jsonl", token_logprobs=True)
        if kind == "graph"
        else tool_log(tmp_path / "t.jsonl")
    )
    a = analyse([log])
    expected = _exact(reference_summarise(a))
    assert _exact(summarise(a)) == expected
    for cut in range(len(a.steps) + 1):
        assert _exact(_joined(a, cut, over_the_wire=True)) == expected
