"""``SamplingSchedule(stages=...)`` through a controlled step: a staged draw on the real embedded model,
and what a staged sample reserves."""

from __future__ import annotations

import importlib.util

import pytest
from langchain_core.messages import HumanMessage

from retryctl.audit import DecisionLog, read_records, verify_log
from retryctl.controller import Budget, Policy
from retryctl.models import Candidate, SamplingParams, Stage, StageOutcome
from retryctl.models._messages import MessagesLike
from retryctl.nodes import ControlledStep, SamplingSchedule
from retryctl.testing import ScriptedBackend
from tests.nodes._support import Runner, user

THINK = Stage(name="think", temperature=0.2, max_tokens=24, start="<think>\n", end=("</think>",))
ANSWER = Stage(name="answer", max_tokens=8, start="\nAnswer:")


class _Seen(ScriptedBackend):
    """A scripted backend that keeps the parameters of each draw."""

    def __init__(self, script: tuple[str, ...]) -> None:
        super().__init__(script)
        self.params: list[SamplingParams] = []

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        assert params is not None
        self.params.append(params)
        return await super().sample(messages, params, k=k)


class TestStagedSchedule:
    def test_every_draw_carries_the_stages_at_the_attempt_s_temperature(self, run: Runner) -> None:
        backend = _Seen(("4", "4", "4"))
        schedule = SamplingSchedule(temperatures=(0.9,), stages=(THINK, ANSWER), seed=1)
        policy = Policy(min_samples=2, max_samples=3, accept_threshold=0.0)
        run(ControlledStep(backend, policy=policy, schedule=schedule).compile(), user("2 + 2?"))
        assert backend.params and all(p.stages == (THINK, ANSWER) for p in backend.params)
        assert all(p.temperature == 0.9 for p in backend.params)

    def test_a_staged_sample_reserves_its_stages_caps_not_max_tokens(self, run: Runner) -> None:
        # 24 + 8 = 32 tokens a sample; max_tokens 4 alone would let a draw of one sample fit in 20.
        policy = Policy(min_samples=1, max_samples=2, accept_threshold=0.0)
        budget = Budget(output_tokens=20)
        staged = SamplingSchedule(max_tokens=4, stages=(THINK, ANSWER))
        backend = _Seen(("4", "4"))
        out = run(ControlledStep(backend, policy=policy, schedule=staged, budget=budget).compile(), user("q"))
        assert backend.params == []  # refused before any draw
        assert out.output["result"]["status"] == "stopped"
        plain = _Seen(("4", "4"))
        schedule = SamplingSchedule(max_tokens=4)
        out = run(ControlledStep(plain, policy=policy, schedule=schedule, budget=budget).compile(), user("q"))
        assert plain.params and out.output["result"]["status"] == "accepted"


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs the 'local' extra")
class TestStagedStepOnTheEmbeddedModel:
    def test_staged_candidates_reach_a_logged_verdict(self, tmp_path):
        from retryctl.models import EmbeddedBackend

        backend = EmbeddedBackend(n_ctx=512, n_threads=1)
        log_path = tmp_path / "decisions.jsonl"
        try:
            with DecisionLog(log_path) as log:
                step = ControlledStep(
                    backend,
                    policy=Policy(min_samples=2, max_samples=3, max_refines=0, low_confidence=("stop",)),
                    schedule=SamplingSchedule(temperatures=(0.8,), seed=7, stages=(THINK, ANSWER)),
                    budget=Budget(samples=3),
                    log=log,
                )
                out = step.compile().invoke({"messages": [HumanMessage("What is 2 + 2?")]})
        finally:
            backend.close()
        result = out["result"]
        assert 2 <= result["usage"]["samples"] <= 3
        # Each sample generated at most its stages' caps; the step's text is a whole staged sample.
        assert 0 < result["usage"]["output_tokens"] <= result["usage"]["samples"] * 32
        assert result["text"].startswith("<think>\n") and "</think>\nAnswer:" in result["text"]
        assert verify_log(log_path).ok
        assert [r for r in read_records(log_path) if r.kind == "verdict"]


def _staged(think: str, answer: str) -> Candidate:
    return Candidate(
        text=think + answer,
        model="scripted",
        finish_reason="stop",
        stages=(StageOutcome("think", think, 6, "stop"), StageOutcome("answer", answer, 2, "stop")),
    )


class TestStagedAnswer:
    def test_the_answer_is_the_last_stage_s_and_no_delimiter_reaches_it(self, run: Runner) -> None:
        # The think stage states 12; the answer stage says 19, twice with a </think> it wrote again
        # (read whole, those two would say "19</think>" and outvote the clean one).
        think = "<think>\n12 + 7: the answer is 12.</think>"
        script = (
            _staged(think, "\nAnswer: 19</think>"),
            _staged(think, "\nAnswer: 19"),
            _staged(think, "\nAnswer: 19</think>"),
        )
        policy = Policy(min_samples=3, max_samples=3, accept_threshold=0.0)
        schedule = SamplingSchedule(stages=(THINK, ANSWER), seed=1)
        out = run(
            ControlledStep(ScriptedBackend(script), policy=policy, schedule=schedule).compile(),
            user("12 + 7?"),
        )
        result = out.output["result"]
        assert result["status"] == "accepted" and result["answer"] == "19"

    def test_a_sample_whose_answer_stage_is_empty_has_no_answer_not_the_think_stage_s(
        self, run: Runner
    ) -> None:
        think = "<think>\nthe answer is 12.</think>"
        script = (_staged(think, "\nAnswer:"),) * 2
        policy = Policy(min_samples=2, max_samples=2, accept_threshold=0.0)
        schedule = SamplingSchedule(stages=(THINK, ANSWER), seed=1)
        out = run(
            ControlledStep(ScriptedBackend(script), policy=policy, schedule=schedule).compile(), user("q")
        )
        # Read whole, the last line would be the think stage's "12.</think>".
        assert out.output["result"]["answer"] is None


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs the 'local' extra")
class TestStagedAnswerOnTheEmbeddedModel:
    def test_the_accepted_answer_is_the_answer_stage_s_without_delimiters(self) -> None:
        from retryctl._answers import default_equivalence
        from retryctl.models import EmbeddedBackend

        # The stages a new user tried (issue #32): a greedy think stage, an answer stage at 1.0.
        think = Stage(name="think", temperature=0.0, max_tokens=32, start="<think>\n", end=("</think>",))
        answer = Stage(name="answer", temperature=1.0, max_tokens=12, start="\nAnswer:")
        backend = EmbeddedBackend(n_ctx=512, n_threads=1)
        try:
            step = ControlledStep(
                backend,
                policy=Policy(min_samples=3, max_samples=3, accept_threshold=0.0, max_refines=0),
                schedule=SamplingSchedule(seed=1, stages=(think, answer)),
                interactive=False,
            )
            out = step.compile().invoke({"messages": [HumanMessage("What is 12 + 7?")]})
        finally:
            backend.close()
        result = out["result"]
        text, said = result["text"], result["answer"]
        assert text.startswith("<think>\n") and "</think>\nAnswer:" in text
        assert said is not None and not any(d in said for d in ("<think>", "</think>", "Answer:"))
        # The answer is what the answer stage says, read alone.
        assert said == default_equivalence(text.split("</think>\nAnswer:", 1)[1])
