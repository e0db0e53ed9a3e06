"""The real path end to end: the embedded SmolLM2 model sampled inside a controlled step graph.

Everything else in tests/nodes uses scripted backends to reach each verdict on purpose; this test checks
that real candidates (real text, real logprobs, real usage) flow through act → assess → decide, that the
verdict is logged with its signals, and that the log verifies.
"""

from __future__ import annotations

import importlib.util
from typing import Any, cast

import pytest
from langchain_core.messages import HumanMessage

from retryctl.audit import DecisionLog, read_records, verify_log
from retryctl.controller import Budget, Policy, ValidatorResult
from retryctl.nodes import ControlledStep, SamplingSchedule

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama_cpp is not importable: install the 'local' extra",
)


def _summary(record: Any) -> dict[str, Any]:
    """A record's ``candidates_summary`` as the dict it is (typed as any JSON value)."""
    return cast("dict[str, Any]", record.candidates_summary)


class TestEmbeddedModelInAControlledStep:
    def test_real_candidates_reach_a_logged_verdict(self, tmp_path):
        from retryctl.models import EmbeddedBackend

        backend = EmbeddedBackend(n_ctx=512, n_threads=1)
        log_path = tmp_path / "decisions.jsonl"
        try:
            with DecisionLog(log_path) as log:
                step = ControlledStep(
                    backend,
                    policy=Policy(min_samples=2, max_samples=4, max_refines=0, low_confidence=("stop",)),
                    schedule=SamplingSchedule(temperatures=(0.8,), seed=7, max_tokens=24),
                    budget=Budget(samples=4),
                    log=log,
                    step_id="capital",
                )
                out = step.compile().invoke(
                    {"messages": [HumanMessage("What is the capital of France? Answer in one word.")]}
                )
        finally:
            backend.close()

        result = out["result"]
        assert result["status"] in {"accepted", "stopped"}
        assert 2 <= result["usage"]["samples"] <= 4
        assert result["usage"]["output_tokens"] > 0
        assert result["text"] and result["text"].strip()
        report = verify_log(log_path)
        assert report.ok, report.error
        verdicts = [r for r in read_records(log_path) if r.kind == "verdict"]
        assert verdicts, "no verdict was logged"
        last = verdicts[-1]
        # Real logprobs were measured and fused: the token-confidence signal is present and in (0, 1].
        assert 0.0 < last.signals["token_confidence"] <= 1.0
        assert last.budget.used["samples"] == result["usage"]["samples"]


class TestRelaxingTheEmbeddedModel:
    def test_a_refused_narrow_rung_relaxes_to_the_wide_one(self, tmp_path):
        from retryctl.models import ConstrainedBackend, EmbeddedBackend, Grammar

        narrow = Grammar(name="ones", gbnf='root ::= "1" | "2"', strictness=1.0)
        wide = Grammar(name="digits", gbnf="root ::= [3-9]", strictness=0.3, description="one digit, 3 to 9")

        def not_one_or_two(text: str) -> ValidatorResult:
            return ValidatorResult("not_one_or_two", text.strip() not in {"1", "2"}, f"got {text.strip()!r}")

        backend = EmbeddedBackend(n_ctx=1024, n_threads=1)
        log_path = tmp_path / "decisions.jsonl"
        try:
            with DecisionLog(log_path) as log:
                step = ControlledStep(
                    ConstrainedBackend(backend, [narrow, wide]),
                    policy=Policy(
                        stopping="sc-2", min_samples=2, max_samples=2, max_refines=1, low_confidence=("stop",)
                    ),
                    schedule=SamplingSchedule(temperatures=(0.7,), seed=11, max_tokens=8),
                    validators=[not_one_or_two],
                    log=log,
                    step_id="add",
                )
                out = step.compile().invoke(
                    {"messages": [HumanMessage("What is 3 + 4? Answer with a number.")]}
                )
        finally:
            backend.close()

        first, second = [r for r in read_records(log_path) if r.kind == "verdict"]
        assert first.action.value == "refine"
        assert _summary(first)["grammars"] == ["ones", "ones"]
        assert first.reason.endswith("strictness 1.00 -> 0.80 (grammar 'ones' -> 'digits')")
        # The second attempt decoded under the wide rung, which the check no longer refuses.
        assert _summary(second)["grammars"] == ["digits", "digits"]
        assert all(a in set("3456789") for a in _summary(second)["answers"])
        assert second.action.value in {"accept", "stop"}
        assert out["result"]["text"] in set("3456789")
        assert verify_log(log_path).ok
