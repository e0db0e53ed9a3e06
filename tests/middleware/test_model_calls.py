"""RetryController.wrap_model_call / awrap_model_call inside a real ``create_agent`` graph."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from pydantic import BaseModel

from retryctl.audit import verify_log
from retryctl.controller import Budget, Policy
from retryctl.middleware import RetryController
from tests.middleware._scripted import ScriptedChat, call, say
from tests.middleware._support import Agent, ano_wait, last_ai, multiply, records, tool_messages
from tests.nodes._support import RateLimited


def _controller(tmp_path: Path, waits: list[float] | None = None, **kw: object) -> RetryController:
    return RetryController(
        log=tmp_path / "log.jsonl",
        sleep=(waits if waits is not None else []).append,
        asleep=ano_wait,
        **kw,  # type: ignore[arg-type]
    )


def _model_verdicts(tmp_path: Path) -> list[tuple[str, str]]:
    rows = records(tmp_path / "log.jsonl")
    return [
        (r["target"], r["action"])
        for r in rows
        if r["kind"] == "verdict" and r["step_id"].startswith("model:")
    ]


class Answer(BaseModel):
    value: int
    unit: str


class TestModelCalls:
    def test_terminal_error_switches_to_the_fallback_model(self, tmp_path: Path, mode: str) -> None:
        primary = ScriptedChat(
            model_name="primary", script=[PermissionError("403: this key may not use the model")]
        )
        backup = ScriptedChat(model_name="backup", script=[say("hello")])
        controller = _controller(tmp_path, fallback_models=[backup])
        out = Agent(primary, [multiply], controller, mode).ask("hi")
        assert last_ai(out).content == "hello"
        assert len(primary.seen) == 1  # a terminal fault is not retried
        assert _model_verdicts(tmp_path) == [("primary", "switch"), ("backup", "accept")]

    def test_transient_error_is_retried_with_backoff(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[TimeoutError("read timed out"), say("hello")])
        waits: list[float] = []
        out = Agent(model, [multiply], _controller(tmp_path, waits), mode).ask("hi")
        assert last_ai(out).content == "hello"
        assert _model_verdicts(tmp_path) == [("scripted", "retry"), ("scripted", "accept")]
        if mode == "sync":
            assert len(waits) == 1 and waits[0] > 0

    def test_bad_tool_arguments_are_refined_naming_the_field(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(
            script=[
                call("multiply", {"a": "six", "b": 7}),
                call("multiply", {"a": 6, "b": 7}, "c2"),
                say("42"),
            ]
        )
        out = Agent(model, [multiply], _controller(tmp_path), mode).ask("6 times 7?")
        # The second model call saw its refused call and the feedback naming the field.
        feedback = [m for m in model.seen[1] if isinstance(m, ToolMessage)]
        assert len(feedback) == 1 and feedback[0].status == "error"
        assert "multiply: field 'a'" in str(feedback[0].content)
        assert "'six'" in str(feedback[0].content)
        assert [m.content for m in tool_messages(out) if m.status == "success"] == ["42.0"]
        assert last_ai(out).content == "42"
        assert _model_verdicts(tmp_path)[:2] == [("scripted", "refine"), ("scripted", "accept")]

    def test_unknown_tool_is_refined(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[call("divide", {"a": 6, "b": 3}), say("2")])
        out = Agent(model, [multiply], _controller(tmp_path), mode).ask("6 over 3?")
        feedback = [m for m in model.seen[1] if isinstance(m, ToolMessage)]
        assert "there is no tool 'divide'" in str(feedback[0].content)
        assert last_ai(out).content == "2"

    def test_structured_output_is_refined_naming_the_field(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(
            script=[
                call("Answer", {"value": "many", "unit": "cm"}),
                call("Answer", {"value": 42, "unit": "cm"}, "c2"),
            ]
        )
        strategy = ToolStrategy(Answer, handle_errors=False)  # parse errors reach the middleware
        agent = Agent(model, [multiply], _controller(tmp_path), mode, response_format=strategy)
        out = agent.ask("how long?")
        assert out["structured_response"] == Answer(value=42, unit="cm")
        feedback = [m for m in model.seen[1] if isinstance(m, ToolMessage)]
        assert "field 'value'" in str(feedback[0].content)

    def test_a_retry_the_budget_cannot_pay_for_is_a_stop_without_its_wait(
        self, tmp_path: Path, mode: str
    ) -> None:
        model = ScriptedChat(script=[RateLimited("3"), RateLimited("3"), say("too late")])
        waits: list[float] = []

        async def asleep(seconds: float) -> None:
            waits.append(seconds)

        controller = RetryController(
            log=tmp_path / "log.jsonl", sleep=waits.append, asleep=asleep, budget=Budget(attempts=2)
        )
        out = Agent(model, [multiply], controller, mode).ask("hi")
        assert len(model.seen) == 2
        assert waits == [3.0]  # the first 429's Retry-After; the second one is answered with the stop
        assert _model_verdicts(tmp_path) == [("scripted", "retry"), ("scripted", "stop")]
        stop = records(tmp_path / "log.jsonl")[-1]
        assert stop["reason"].startswith("run budget 'attempts' is spent (2 of 2); the retry it called for")
        assert stop["retry_after_s"] is None
        assert (stop["budget"]["used"]["attempts"], stop["budget"]["limit"]["attempts"]) == (2, 2)
        assert "retryctl stopped the agent: run budget 'attempts' is spent" in str(last_ai(out).content)

    def test_a_final_answer_no_check_ran_on_is_accepted_unchecked(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7}), say("42")])
        Agent(model, [multiply], _controller(tmp_path), mode).ask("6 times 7?")
        verdicts = [r for r in records(tmp_path / "log.jsonl") if r["kind"] == "verdict"]
        by_step = {r["step_id"].split(":")[0]: r for r in verdicts}
        # The tool call's arguments were checked against its schema; the tool's result and the final
        # answer were not checked at all, and say so instead of "confidence 1.00".
        checked = [(r["step_id"].split(":")[0], r["checked"], r["confidence"]) for r in verdicts]
        assert checked == [("model", True, 1.0), ("tool", False, None), ("model", False, None)]
        assert by_step["tool"]["reason"] == "accepted unchecked: no check ran on the result of 'multiply'"
        assert verdicts[-1]["reason"] == "accepted unchecked: no check ran on the result of 'scripted'"

    def test_a_spent_budget_ends_the_agent_naming_it(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[say("unused")])
        controller = _controller(tmp_path, budget=Budget(attempts=0))
        out = Agent(model, [multiply], controller, mode).ask("hi")
        assert "retryctl stopped the agent: run budget 'attempts'" in str(last_ai(out).content)
        assert model.seen == []
        assert verify_log(tmp_path / "log.jsonl").ok


class TestFinalAnswerSampling:
    def test_agreeing_samples_are_accepted(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(
            script=[say("The answer is 42"), say("The answer is 42"), say("The answer is 42")]
        )
        policy = Policy(weights={"validators": 1.0, "agreement": 1.0}, min_samples=3, max_samples=3)
        controller = _controller(tmp_path, sample_final=True, model_policy=policy)
        agent = Agent(model, [multiply], controller, mode)
        out = agent.ask("6 times 7?")
        assert last_ai(out).content == "The answer is 42"
        assert len(model.seen) == 3
        assert agent.run().model_calls == 3
        assert _model_verdicts(tmp_path) == [("scripted", "accept")]

    def test_disagreeing_samples_are_not_accepted(self, tmp_path: Path, mode: str) -> None:
        answers = [say("The answer is 41"), say("The answer is 42"), say("The answer is 43")]
        model = ScriptedChat(script=answers)
        policy = Policy(
            weights={"validators": 1.0, "agreement": 1.0}, min_samples=3, max_samples=3, low_confidence=()
        )
        controller = _controller(tmp_path, sample_final=True, model_policy=policy)
        out = Agent(model, [multiply], controller, mode).ask("6 times 7?")
        assert "retryctl stopped the agent" in str(last_ai(out).content)
        assert _model_verdicts(tmp_path) == [("scripted", "stop")]

    def test_off_by_default(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[say("The answer is 42")])
        Agent(model, [multiply], _controller(tmp_path), mode).ask("6 times 7?")
        assert len(model.seen) == 1


class TestOnFailure:
    def test_continue_ends_the_agent_with_a_message(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[PermissionError("403: no access")])
        out = Agent(model, [multiply], _controller(tmp_path), mode).ask("hi")
        text = str(last_ai(out).content)
        assert text.startswith("retryctl stopped the agent:") and "PermissionError" in text

    def test_error_raises_the_last_failure(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[PermissionError("403: no access")])
        agent = Agent(model, [multiply], _controller(tmp_path, on_failure="error"), mode)
        with pytest.raises(PermissionError, match="403"):
            agent.ask("hi")

    def test_a_tool_bug_raises_with_error(self, tmp_path: Path, mode: str) -> None:
        @tool
        def crashing(a: float, b: float) -> float:
            """Multiply two numbers."""
            raise RuntimeError("multiplier crashed")

        model = ScriptedChat(script=[call("crashing", {"a": 1, "b": 2})])
        agent = Agent(model, [crashing], _controller(tmp_path, on_failure="error"), mode)
        with pytest.raises(RuntimeError, match="multiplier crashed"):
            agent.ask("1 times 2?")
