"""Results lines, the maximum-budget test, the batch breaker and the summary."""

from __future__ import annotations

from typing import Any

import pytest

from retryctl.batch import BatchBreaker, Task, at_max_budget, summarise_results
from retryctl.batch._outcome import result_line


def _result(status: str = "accepted", **kw: object) -> dict[str, object]:
    return {
        "status": status,
        "answer": "42",
        "confidence": 0.9,
        "reason": "ok",
        "usage": {"samples": 3.0},
        **kw,
    }


class TestAtMaxBudget:
    def test_limits_in_the_result_decide(self) -> None:
        assert at_max_budget(_result(usage={"samples": 8.0}, limits={"samples": 8}))
        assert not at_max_budget(_result("stopped", usage={"samples": 5.0}, limits={"samples": 8}))

    def test_without_limits_the_budget_spent_reason_decides(self) -> None:
        spent = "step 'solve' budget 'samples' is spent (9 of 8)"
        assert at_max_budget(_result("stopped", reason=spent))
        assert at_max_budget(_result("needs_user", reason=spent + "; asking the user whether to extend it"))
        assert not at_max_budget(_result("stopped", reason="breaker of 'gpt' is open; nothing left to try"))
        assert not at_max_budget(_result("accepted", reason=spent))


class TestResultLine:
    def test_graded_line(self) -> None:
        line = result_line(
            Task(id="t", question="q", gold="42.0"), {"result": _result()}, tries=2, elapsed_s=0.5
        )
        assert line["status"] == "accepted" and line["correct"] is True and line["tries"] == 2
        assert line["at_max_budget"] is False

    def test_state_without_result_is_an_error_line(self) -> None:
        line = result_line(Task(id="t", question="q"), {"messages": []}, tries=1, elapsed_s=0.1)
        assert line["status"] == "error" and "no valid 'result'" in line["error"]


class TestBatchBreaker:
    def test_trips_after_k_consecutive_at_max_budget(self) -> None:
        breaker = BatchBreaker(3)
        flags = [True, True, False, True, True, True]
        tripped = [
            breaker.record({"id": str(i), "status": "stopped", "at_max_budget": f})
            for i, f in enumerate(flags)
        ]
        assert tripped == [False, False, False, False, False, True]
        assert "3 consecutive tasks ended at their maximum budget (3, 4, 5)" in breaker.explain()

    def test_errors_neither_count_nor_reset(self) -> None:
        breaker = BatchBreaker(2)
        breaker.record({"id": "a", "status": "stopped", "at_max_budget": True})
        assert not breaker.record({"id": "b", "status": "error"})
        assert breaker.record({"id": "c", "status": "stopped", "at_max_budget": True})

    def test_off_never_trips_and_bad_k_is_refused(self) -> None:
        breaker = BatchBreaker(None)
        assert not any(
            breaker.record({"id": str(i), "status": "stopped", "at_max_budget": True}) for i in range(50)
        )
        with pytest.raises(ValueError, match="k must be >= 1"):
            BatchBreaker(0)


class TestSummariseResults:
    def test_accuracy_samples_cost_and_mix(self) -> None:
        lines: list[dict[str, Any]] = [
            {"id": "a", "status": "accepted", "correct": True, "usage": {"samples": 3, "usd": 0.01}},
            {
                "id": "b",
                "status": "stopped",
                "correct": False,
                "at_max_budget": True,
                "usage": {"samples": 9, "usd": 0.03},
            },
            {"id": "c", "status": "accepted", "usage": {"samples": 6}},
            {"id": "d", "status": "error", "error": "boom"},
        ]
        s = summarise_results(lines)
        assert s["accuracy"] == 0.5 and s["graded"] == 2
        assert s["avg_samples_finishing_try"] == 6.0 and s["usd"] == pytest.approx(0.04)
        assert s["statuses"] == {"accepted": 2, "stopped": 1, "error": 1}
        assert s["errors"] == 1 and s["at_max_budget"] == 1

    def test_a_task_run_again_counts_once_by_its_last_line(self) -> None:
        lines: list[dict[str, object]] = [
            {"id": "a", "status": "error", "error": "boom"},
            {"id": "b", "status": "error", "error": "boom"},
            {"id": "a", "status": "accepted", "usage": {"samples": 3}},
            {"id": "b", "status": "error", "error": "boom again"},
        ]
        s = summarise_results(lines)
        assert s["tasks"] == 2 and s["finished"] == 1 and s["errors"] == 1
        assert s["statuses"] == {"accepted": 1, "error": 1}


class TestAtMaxBudgetFromAControlledStep:
    def test_a_stopped_step_result_is_judged_by_its_limits_not_its_wording(self):
        from langchain_core.messages import HumanMessage

        from retryctl.controller import Budget, Policy
        from retryctl.nodes import ControlledStep
        from retryctl.testing import ScriptedBackend

        backend = ScriptedBackend(["1", "2", "3", "4"], cycle=True)
        policy = Policy(stopping="sc-2", min_samples=2, max_samples=2, low_confidence=("refine",))
        step = ControlledStep(backend, policy=policy, budget=Budget(samples=4))
        out = step.compile().invoke({"messages": [HumanMessage("q")]})
        result = dict(out["result"])
        assert result["status"] == "stopped" and result["limits"]["samples"] == 4
        result["reason"] = "ended"  # no budget wording left: the limits alone must tell
        assert at_max_budget(result)
