"""The controlled step graph: every verdict reached through real graph execution, sync and async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from retryctl.audit import DecisionLog, VerdictRecord, read_records, verify_log
from retryctl.controller import (
    Breaker,
    BreakerConfig,
    Budget,
    ManualClock,
    Policy,
    ValidatorResult,
)
from retryctl.exceptions import ConfigError
from retryctl.models import TransientBackendError
from retryctl.nodes import ControlledStep, SamplingSchedule, parse_reply, sqlite_checkpointer
from retryctl.testing import CapturedRun, ScriptedBackend, acapture_verdicts, capture_verdicts
from tests.nodes._support import RateLimited, Runner, Sleeps, user

ONE: dict[str, Any] = {"stopping": "sc-1", "min_samples": 1, "max_samples": 1}
THREE: dict[str, Any] = {"stopping": "sc-3", "min_samples": 3, "max_samples": 3}


def cfg(thread: str = "t") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def equals_42(text: str) -> ValidatorResult:
    return ValidatorResult("equals_42", text.strip() == "42", f"got {text.strip()!r}")


class TestControlledStep:
    def test_accept_when_samples_agree(self, run: Runner) -> None:
        backend = ScriptedBackend(["The answer is 42"] * 3)
        graph = ControlledStep(backend, policy=Policy(**THREE)).compile()
        out = run(graph, user("6 * 7?"))
        assert out.actions == ["accept"]
        result = out.output["result"]
        assert result["status"] == "accepted"
        assert result["answer"] == "42"
        assert out.output["messages"][-1].content == "The answer is 42"
        assert result["usage"]["samples"] == 3

    def test_token_confidence_and_a_verifier_are_fused(self, run: Runner) -> None:
        backend = ScriptedBackend(["42"] * 3, confidence=0.9)
        seen: list[str] = []

        def doubtful(text: str) -> float:
            seen.append(text)
            return 0.0

        policy = Policy(**THREE, low_confidence=("stop",))
        out = run(ControlledStep(backend, policy=policy, verifier=doubtful).compile(), user("q"))
        evidence = out.verdicts[0]["verdict"]["evidence"]
        assert evidence["signals"] == pytest.approx(
            {"token_confidence": 0.9, "weakest_span": 0.9, "agreement": 1.0, "verifier": 0.0}
        )
        # Default weights agreement 0.5, verifier 0.3, token confidence 0.2, weakest span 0.1, over
        # their sum 1.1: (0.5 + 0.18 + 0.09) / 1.1 = 0.7 < 0.8.
        assert out.verdicts[0]["verdict"]["confidence"] == pytest.approx(0.7)
        assert out.actions == ["stop"]
        assert seen == ["42"]

    def test_refine_feeds_the_failing_check_back(self, run: Runner) -> None:
        backend = ScriptedBackend(["41", "42"])
        graph = ControlledStep(backend, policy=Policy(**ONE), validators=[equals_42]).compile()
        out = run(graph, user("6 * 7?"))
        assert out.actions == ["refine", "accept"]
        second_prompt = backend.calls[1].messages
        assert second_prompt[-2] == {"role": "assistant", "content": "41"}
        assert "equals_42" in second_prompt[-1]["content"]
        assert "got '41'" in second_prompt[-1]["content"]
        assert out.output["result"]["answer"] == "42"

    def test_retry_after_a_transient_fault_with_backoff(self, run: Runner) -> None:
        sleeps = Sleeps()
        backend = ScriptedBackend([TimeoutError("slow"), "42"])
        step = ControlledStep(backend, policy=Policy(**ONE), sleep=sleeps, asleep=sleeps.asleep)
        out = run(step.compile(), user("q"))
        assert out.actions == ["retry", "accept"]
        # tenacity's wait_exponential(multiplier=0.5): 0.5 * 2 ** (1 - 1) before the first retry.
        assert sleeps.waits == [0.5]

    def test_retry_honours_retry_after(self, run: Runner) -> None:
        sleeps = Sleeps()
        backend = ScriptedBackend([RateLimited("7"), "42"])
        step = ControlledStep(backend, policy=Policy(**ONE), sleep=sleeps, asleep=sleeps.asleep)
        out = run(step.compile(), user("q"))
        assert out.actions == ["retry", "accept"]
        assert out.verdicts[0]["verdict"]["retry_after_s"] == 7.0
        assert sleeps.waits == [7.0]

    def test_retry_after_a_backend_error_waits_its_retry_after(self, run: Runner) -> None:
        sleeps = Sleeps()
        fault = TransientBackendError("503 overloaded", backend="scripted", status_code=503, retry_after_s=3)
        backend = ScriptedBackend([fault, "42"])
        step = ControlledStep(backend, policy=Policy(**ONE), sleep=sleeps, asleep=sleeps.asleep)
        out = run(step.compile(), user("q"))
        assert out.actions == ["retry", "accept"]
        assert sleeps.waits == [3.0]

    def test_a_retry_after_the_budget_cannot_pay_for_is_a_stop_without_its_wait(self, run: Runner) -> None:
        sleeps = Sleeps()
        fault = TransientBackendError("429 too many", backend="scripted", status_code=429, retry_after_s=3)
        backend = ScriptedBackend([fault, fault, "42"])
        step = ControlledStep(
            backend, policy=Policy(**ONE), budget=Budget(attempts=2), sleep=sleeps, asleep=sleeps.asleep
        )
        out = run(step.compile(), user("q"))
        assert out.actions == ["retry", "stop"]
        assert sleeps.waits == [3.0]  # the first retry's; the second 429 is answered with the stop
        stop = out.verdicts[-1]["verdict"]
        assert stop["reason"].startswith("step 'step' budget 'attempts' is spent (2 of 2); the retry")
        assert stop["retry_after_s"] is None
        evidence = stop["evidence"]
        assert (evidence["budget_used"]["attempts"], evidence["budget_limit"]["attempts"]) == (2, 2)

    def test_failed_calls_spend_the_attempts_budget(self, run: Runner) -> None:
        sleeps = Sleeps()
        backend = ScriptedBackend([TimeoutError("slow")] * 5 + ["42"])
        policy = Policy(**ONE, max_retries=10)
        step = ControlledStep(
            backend, policy=policy, budget=Budget(attempts=2), sleep=sleeps, asleep=sleeps.asleep
        )
        out = run(step.compile(), user("q"))
        # Two failed calls spend the two attempts: the second is not answered with a retry the budget
        # cannot pay for (and its backoff is not slept), but with the stop at once.
        assert out.actions == ["retry", "stop"]
        assert len(backend.calls) == 2
        assert len(sleeps.waits) == 1  # the one retry's wait; none before the stop
        result = out.output["result"]
        assert result["status"] == "stopped"
        assert result["reason"].startswith("step 'step' budget 'attempts' is spent (2 of 2); the retry")
        assert result["usage"]["attempts"] == 2 and result["usage"]["samples"] == 0

    def test_switch_after_a_terminal_fault(self, run: Runner) -> None:
        first = ScriptedBackend([RuntimeError("model deleted")], model="a")
        second = ScriptedBackend(["42"], model="b")
        out = run(ControlledStep([first, second], policy=Policy(**ONE)).compile(), user("q"))
        assert out.actions == ["switch", "accept"]
        assert out.verdicts[0]["verdict"]["switch_to"] == "b"
        assert [v["target"] for v in out.verdicts] == ["a", "b"]

    def test_switch_skips_a_model_whose_breaker_is_open(self, run: Runner) -> None:
        breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=60), clock=ManualClock())
        breaker.record_failure("a")
        first = ScriptedBackend(["99"], model="a")
        second = ScriptedBackend(["42"], model="b")
        step = ControlledStep([first, second], policy=Policy(**ONE), breaker=breaker)
        out = run(step.compile(), user("q"))
        assert out.actions == ["switch", "accept"]
        assert first.calls == []
        assert "breaker" in out.verdicts[0]["verdict"]["reason"]

    def test_a_breaker_that_opens_mid_step_causes_a_switch(self, run: Runner) -> None:
        breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=60), clock=ManualClock())
        first = ScriptedBackend([TimeoutError("slow")], model="a")
        second = ScriptedBackend(["42"], model="b")
        step = ControlledStep([first, second], policy=Policy(**ONE), breaker=breaker)
        out = run(step.compile(), user("q"))
        # A transient fault is normally retried; the failure opened a's breaker, so decide switches.
        assert out.actions == ["switch", "accept"]
        assert out.verdicts[0]["verdict"]["evidence"]["breakers"] == {"a": "open"}

    def test_the_result_names_the_member_that_answered(self, run: Runner) -> None:
        small = ScriptedBackend(["41", "42", "40"], model="small")
        large = ScriptedBackend(["42"] * 3, model="large")
        out = run(ControlledStep([small, large], policy=Policy(**THREE)).compile(), user("q"))
        assert out.actions == ["switch", "accept"]
        result = out.output["result"]
        assert (result["status"], result["answer"], result["served_by"]) == ("accepted", "42", "large")
        # attempts: rounds ending in a verdict; usage["attempts"]: the calls they made.
        assert result["attempts"] == len(out.verdicts) == 2
        assert result["usage"]["attempts"] == len(small.calls) + len(large.calls)

    def test_a_stopped_step_names_who_drew_its_best_answer_or_nobody(self, run: Runner) -> None:
        backend = ScriptedBackend(["1", "2", "3"], model="m")
        policy = Policy(**THREE, low_confidence=("stop",))
        out = run(ControlledStep(backend, policy=policy).compile(), user("q"))
        assert (out.output["result"]["answer"], out.output["result"]["served_by"]) == ("1", "m")
        refused = ControlledStep(ScriptedBackend(["1"]), policy=Policy(**ONE), budget=Budget(attempts=0))
        out = run(refused.compile(), user("q"))
        assert out.actions == ["stop"]
        assert (out.output["result"]["answer"], out.output["result"]["served_by"]) == (None, None)

    def test_stop_when_the_ladder_says_stop(self, run: Runner) -> None:
        backend = ScriptedBackend(["1", "2", "3"])
        policy = Policy(**THREE, low_confidence=("stop",))
        out = run(ControlledStep(backend, policy=policy).compile(), user("q"))
        assert out.actions == ["stop"]
        result = out.output["result"]
        assert result["status"] == "stopped"
        assert result["answer"] == "1"  # the best so far: first of three tied answers
        assert len(out.output["messages"]) == 1  # a stop adds no answer to the conversation

    def test_stop_when_the_budget_is_spent(self, run: Runner) -> None:
        backend = ScriptedBackend(["42"] * 3)
        step = ControlledStep(backend, policy=Policy(**THREE), budget=Budget(samples=2))
        out = run(step.compile(), user("q"))
        assert out.actions == ["stop"]
        assert "'samples'" in out.output["result"]["reason"]
        assert backend.calls == []


class TestThreads:
    def test_a_new_question_on_a_thread_starts_fresh(self, run: Runner) -> None:
        backend = ScriptedBackend([TimeoutError("slow"), "42", "7"])
        sleeps = Sleeps()
        step = ControlledStep(backend, policy=Policy(**ONE), sleep=sleeps, asleep=sleeps.asleep)
        graph = step.compile(checkpointer=InMemorySaver())
        first = run(graph, user("6 * 7?"), cfg())
        assert first.output["result"]["attempts"] == 2
        second = run(graph, user("3 + 4?"), cfg())
        assert second.actions == ["accept"]
        assert second.output["result"]["attempts"] == 1
        assert second.output["result"]["usage"]["samples"] == 1
        assert [v["verdict"]["action"] for v in second.output["verdicts"]] == ["accept"]
        assert [m.content for m in second.output["messages"]] == ["6 * 7?", "42", "3 + 4?", "7"]


class TestAskUser:
    def graph(self, **kwargs: Any) -> Any:
        return self.graph_with(InMemorySaver(), **kwargs)

    def graph_with(self, checkpointer: Any, **kwargs: Any) -> Any:
        backend = ScriptedBackend(["1", "2", "3"], cycle=True)
        policy = Policy(**THREE, max_refines=0, low_confidence=("ask_user",))
        return ControlledStep(backend, policy=policy, **kwargs).compile(checkpointer=checkpointer)

    def test_interrupt_payload(self, run: Runner) -> None:
        out = run(self.graph(), user("which?"), cfg())
        assert out.actions == ["ask_user"]
        payload = out.interrupts[0].value
        assert payload["type"] == "retryctl.ask_user"
        assert payload["question"] == "which?"
        assert payload["best"]["answer"] == "1"
        assert {o["action"] for o in payload["options"]} == {"accept", "answer", "extend", "stop"}
        assert payload["evidence"]["signals"]["agreement"] == pytest.approx(1 / 3)

    def test_not_interactive_ends_with_needs_user_instead_of_pausing(self, run: Runner) -> None:
        out = run(self.graph(interactive=False), user("which?"), cfg())
        assert out.actions == ["ask_user"]
        assert out.interrupts == []
        result = out.output["result"]
        assert result["status"] == "needs_user"
        assert result["answer"] == "1" and "asking the user" in result["reason"]

    @pytest.mark.parametrize(
        ("reply", "status", "answer"),
        [
            ({"action": "accept"}, "accepted", "1"),
            ({"action": "answer", "answer": "7"}, "answered_by_user", "7"),
            ("7", "answered_by_user", "7"),
            ({"action": "stop"}, "stopped", "1"),
        ],
    )
    def test_resume(self, run: Runner, reply: Any, status: str, answer: str) -> None:
        graph = self.graph()
        run(graph, user("which?"), cfg())
        out = run(graph, Command(resume=reply), cfg())
        assert out.output["result"]["status"] == status
        assert out.output["result"]["answer"] == answer
        assert len(out.replies) == 1

    @pytest.mark.parametrize(
        ("reply", "action", "target", "reason", "served_by"),
        [
            ({"action": "accept"}, "accept", "m", "accepted by the user (confidence", "m"),
            ("7", "accept", "user", "answered by the user", "user"),
            ({"action": "stop"}, "stop", "m", "the user chose to stop (confidence", "m"),
        ],
    )
    def test_the_reply_is_logged_as_the_verdict_that_ends_the_step(
        self, run: Runner, tmp_path: Any, reply: Any, action: str, target: str, reason: str, served_by: str
    ) -> None:
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            backend = ScriptedBackend(["1", "2", "3"], model="m", cycle=True)
            policy = Policy(**THREE, max_refines=0, low_confidence=("ask_user",))
            graph = ControlledStep(backend, policy=policy, log=log).compile(checkpointer=InMemorySaver())
            run(graph, user("which?"), cfg())
            out = run(graph, Command(resume=reply), cfg())
        asked, last = [r for r in read_records(path) if isinstance(r, VerdictRecord)]
        assert asked.action.value == "ask_user"
        assert (last.action.value, last.target, last.attempt) == (action, target, asked.attempt)
        assert last.reason.startswith(reason)
        assert last.extra == {"decided_by": "user", "reply": parse_reply(reply).model_dump(mode="json")}
        assert verify_log(path).ok
        # The stream, the state's history and the result say the same.
        assert out.actions == [action] and out.verdicts[0]["extra"]["decided_by"] == "user"
        assert [v["verdict"]["action"] for v in out.output["verdicts"]] == ["ask_user", action]
        result = out.output["result"]
        assert result["reason"] == last.reason and result["served_by"] == served_by
        if action == "accept" and target == "user":
            assert (last.answer, last.confidence, result["confidence"]) == ("7", None, None)

    def test_an_extension_is_logged_before_the_attempt_it_allows(self, run: Runner, tmp_path: Any) -> None:
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            backend = ScriptedBackend(["1", "2", "3", "5", "5", "5"])
            policy = Policy(**THREE, low_confidence=("refine",), on_budget_exhausted="ask_user")
            step = ControlledStep(backend, policy=policy, budget=Budget(samples=3), log=log)
            graph = step.compile(checkpointer=InMemorySaver())
            run(graph, user("q"), cfg())
            run(graph, Command(resume={"action": "extend", "budget": {"samples": 3}}), cfg())
        records = [r for r in read_records(path) if isinstance(r, VerdictRecord)]
        # The refine of attempt 1 needs three samples the budget does not have: the question comes at
        # once, carrying the refine, and the extension makes it (attempt 2 is the refine round).
        assert [(r.action.value, r.attempt) for r in records] == [
            ("ask_user", 1), ("retry", 1), ("accept", 2)
        ]  # fmt: skip
        assert records[0].feedback is not None and "the refine it called for" in records[0].reason
        assert records[1].reason == "the user extended the budget (samples +3); trying again"
        assert records[1].extra["reply"] == {"action": "extend", "answer": None, "budget": {"samples": 3.0}}
        refined = backend.calls[-1].messages
        assert [m["role"] for m in refined[-2:]] == ["assistant", "user"]
        assert refined[-1]["content"] == records[0].feedback

    def test_a_bad_reply_asks_again(self, run: Runner) -> None:
        graph = self.graph()
        run(graph, user("which?"), cfg())
        out = run(graph, Command(resume={"action": "extend"}), cfg())
        assert out.interrupted
        assert "needs a 'budget'" in out.interrupts[0].value["error"]
        done = run(graph, Command(resume={"action": "stop"}), cfg())
        assert done.output["result"]["status"] == "stopped"

    def test_resumes_from_a_fresh_sqlite_checkpointer(self, tmp_path: Any) -> None:
        # SqliteSaver is sync-only (async graphs use AsyncSqliteSaver), so this runs sync.
        run = capture_verdicts
        path = tmp_path / "run.sqlite"
        first_saver = sqlite_checkpointer(path)
        run(self.graph_with(first_saver), user("which?"), cfg())
        first_saver.conn.close()
        second_saver = sqlite_checkpointer(path)
        out = run(self.graph_with(second_saver), Command(resume="2"), cfg())
        second_saver.conn.close()
        assert out.output["result"]["answer"] == "2"

    def test_resumes_async_from_a_fresh_async_sqlite_checkpointer(self, tmp_path: Any) -> None:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = str(tmp_path / "run.sqlite")

        async def session(input: Any) -> CapturedRun:
            async with AsyncSqliteSaver.from_conn_string(path) as saver:
                return await acapture_verdicts(self.graph_with(saver), input, cfg())

        first = asyncio.run(session(user("which?")))
        assert first.interrupted
        out = asyncio.run(session(Command(resume={"action": "accept"})))
        assert out.output["result"]["status"] == "accepted"

    def test_budget_exhaustion_asks_to_extend(self, run: Runner) -> None:
        backend = ScriptedBackend(["1", "2", "3", "5", "5", "5"])
        policy = Policy(**THREE, low_confidence=("refine",), on_budget_exhausted="ask_user")
        step = ControlledStep(backend, policy=policy, budget=Budget(samples=3))
        graph = step.compile(checkpointer=InMemorySaver())
        first = run(graph, user("q"), cfg())
        assert first.actions == ["ask_user"]  # the refine it would take: no samples left for it
        assert "'samples' is spent" in first.interrupts[0].value["reason"]
        out = run(graph, Command(resume={"action": "extend", "budget": {"samples": 3}}), cfg())
        assert out.actions == ["retry", "accept"]  # the user's extension is logged, then the new attempt
        assert out.output["result"]["answer"] == "5"
        assert out.output["result"]["usage"]["samples"] == 6
        # The result carries the limits in force, the user's extension included.
        assert out.output["result"]["limits"]["samples"] == 6


class TestSampling:
    def test_draws_until_the_rule_stops_with_scheduled_knobs(self, run: Runner) -> None:
        backend = ScriptedBackend(["42"] * 3)
        schedule = SamplingSchedule(temperatures=(0.2,), disagreement_temperature=1.0, seed=10, top_p=0.9)
        policy = Policy(stopping="sc-3", min_samples=1, max_samples=5)
        out = run(ControlledStep(backend, policy=policy, schedule=schedule).compile(), user("q"))
        assert out.actions == ["accept"]
        # min_samples first, then the two more sc-3 is sure to need, in one call: the same samples
        # (seeds 10, 11, 12) as one call each.
        assert [c.k for c in backend.calls] == [1, 2]
        assert [c.params.temperature for c in backend.calls] == [0.2, 1.0]
        assert [c.params.seed for c in backend.calls] == [10, 11]
        assert [c["seed"] for c in out.output["candidates"]] == [10, 11, 12]
        assert {c.params.top_p for c in backend.calls} == {0.9}

    def test_the_samples_the_rule_is_sure_to_need_come_in_one_call(self, run: Runner) -> None:
        # The default rule at a cap of 8 cannot stop before 3 agreeing samples: one call of 3, and
        # the rule is asked then, where it would have stopped asking after each.
        backend = ScriptedBackend(["42"] * 3)
        policy = Policy(stopping="default", min_samples=1, max_samples=8)
        out = run(ControlledStep(backend, policy=policy).compile(), user("q"))
        assert out.actions == ["accept"]
        assert [c.k for c in backend.calls] == [3]
        assert out.output["result"]["usage"]["samples"] == 3

    def test_a_budget_too_small_for_the_batch_gets_what_one_by_one_would(self, run: Runner) -> None:
        backend = ScriptedBackend(["42"] * 3)
        policy = Policy(stopping="default", min_samples=1, max_samples=8, on_budget_exhausted="stop")
        step = ControlledStep(backend, policy=policy, budget=Budget(samples=2))
        out = run(step.compile(), user("q"))
        assert [c.k for c in backend.calls] == [1, 1]  # 3, then 2, did not fit: one at a time
        assert out.output["result"]["usage"]["samples"] == 2

    def test_under_a_wall_time_limit_samples_come_one_call_each(self, run: Runner) -> None:
        # A backend that draws one after another could run out of time on the whole batch.
        backend = ScriptedBackend(["42"] * 3)
        policy = Policy(stopping="default", min_samples=1, max_samples=8)
        out = run(ControlledStep(backend, policy=policy, budget=Budget(wall_s=60.0)).compile(), user("q"))
        assert out.actions == ["accept"]
        assert [c.k for c in backend.calls] == [1, 1, 1]

    def test_each_attempt_has_its_own_temperature_and_seeds(self, run: Runner) -> None:
        backend = ScriptedBackend(["41", "42"])
        schedule = SamplingSchedule(temperatures=(0.2, 0.9), seed=10)
        step = ControlledStep(backend, policy=Policy(**ONE), schedule=schedule, validators=[equals_42])
        out = run(step.compile(), user("q"))
        assert out.actions == ["refine", "accept"]
        assert [(c.params.temperature, c.params.seed) for c in backend.calls] == [(0.2, 10), (0.9, 1010)]

    def test_schedule_rejects_a_bad_value_by_name(self) -> None:
        with pytest.raises(ConfigError, match=r"temperatures\[1\]"):
            SamplingSchedule(temperatures=(0.5, 9.0))
        with pytest.raises(ConfigError, match="batch"):
            SamplingSchedule(batch=0)


class TestEvents:
    def test_every_verdict_is_logged_and_streamed(self, run: Runner, tmp_path: Any) -> None:
        path = tmp_path / "decisions.jsonl"
        sleeps = Sleeps()
        with DecisionLog(path) as log:
            backend = ScriptedBackend([TimeoutError("slow"), "42"])
            step = ControlledStep(
                backend, policy=Policy(**ONE), log=log, sleep=sleeps, asleep=sleeps.asleep, step_id="solve"
            )
            out = run(step.compile(), user("q"), cfg("run-1"))
        records = [r for r in read_records(path) if isinstance(r, VerdictRecord)]
        assert [r.action.value for r in records] == out.actions == ["retry", "accept"]
        assert {r.run_id for r in records} == {"run-1"}
        assert {r.step_id for r in records} == {"solve"}
        assert [r.attempt for r in records] == [1, 2]
        assert verify_log(path).ok
        assert [e["step_id"] for e in out.verdicts] == ["solve", "solve"]


class TestConfig:
    def test_models_are_checked(self) -> None:
        with pytest.raises(ConfigError, match="models"):
            ControlledStep([])
        with pytest.raises(ConfigError, match="unique"):
            ControlledStep([ScriptedBackend([]), ScriptedBackend([])])


class TestEvidence:
    """A repeated near-greedy candidate is no new vote; another member agreeing is."""

    def test_near_greedy_repeats_do_not_raise_agreement(self, run: Runner) -> None:
        policy = Policy(
            stopping="default", min_samples=3, max_samples=3, accept_threshold=0.9, low_confidence=("stop",)
        )
        cold = SamplingSchedule(temperatures=(0.2,), seed=1)
        out = run(
            ControlledStep(ScriptedBackend(["42"] * 3), policy=policy, schedule=cold).compile(), user("q")
        )
        hot = SamplingSchedule(temperatures=(0.7,), seed=1)
        ref = run(
            ControlledStep(ScriptedBackend(["42"] * 3), policy=policy, schedule=hot).compile(), user("q")
        )
        # Three draws each, but near-greedy they are one vote: the rule's posterior is over one sample.
        notes = out.verdicts[0]["verdict"]["evidence"]["notes"]
        assert any(n.startswith("agreement: posterior of") and n.endswith("over 1 samples") for n in notes)
        assert any(n.endswith("over 3 samples") for n in ref.verdicts[0]["verdict"]["evidence"]["notes"])
        assert out.output["result"]["usage"]["samples"] == ref.output["result"]["usage"]["samples"] == 3
        # One vote and no logprobs is no check at all: that verdict claims no confidence.
        one_vote = out.verdicts[0]["verdict"]
        assert (one_vote["checked"], one_vote["confidence"]) == (False, None)
        assert ref.verdicts[0]["verdict"]["checked"] is True
        assert ref.verdicts[0]["verdict"]["confidence"] >= 0.9
        assert ref.actions == ["accept"] and out.actions == ["stop"]

    def test_members_that_agree_count_for_more_than_one_agreeing_with_itself(self, run: Runner) -> None:
        weights = {"agreement": 0.5, "cross_member": 0.3}
        policy = Policy(**THREE, weights=weights, accept_threshold=0.99, low_confidence=("switch", "stop"))

        def second_verdict(first_answers: list[str]) -> dict[str, Any]:
            small = ScriptedBackend(first_answers, model="small")
            large = ScriptedBackend(["42"] * 3, model="large")
            out = run(ControlledStep([small, large], policy=policy).compile(), user("q"))
            assert [v["target"] for v in out.verdicts] == ["small", "large"]
            verdict: dict[str, Any] = out.verdicts[1]["verdict"]
            return verdict

        agreeing = second_verdict(["42", "41", "42"])
        alone = second_verdict(["1", "2", "3"])
        assert agreeing["evidence"]["signals"]["cross_member"] == pytest.approx(2 / 3)
        assert alone["evidence"]["signals"]["cross_member"] == 0.0
        assert agreeing["confidence"] > alone["confidence"]

    def test_a_draw_of_nothing_but_repeats_ends_sampling(self, run: Runner) -> None:
        # Near-greedy, every sample after the first repeats it: drawing to max_samples would only cost.
        policy = Policy(stopping="default", min_samples=1, max_samples=8, low_confidence=("stop",))
        cold = SamplingSchedule(temperatures=(0.2,), seed=1)
        backend = ScriptedBackend(["42"], cycle=True)
        out = run(ControlledStep(backend, policy=policy, schedule=cold).compile(), user("q"))
        drawn = out.output["result"]["usage"]["samples"]
        assert 1 < drawn < 8
        notes = out.verdicts[0]["verdict"]["evidence"]["notes"]
        assert any("only repeated earlier ones (temperature 0.2)" in n for n in notes)
