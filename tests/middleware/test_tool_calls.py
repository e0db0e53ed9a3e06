"""RetryController.wrap_tool_call / awrap_tool_call inside a real ``create_agent`` graph."""

from __future__ import annotations

from pathlib import Path

from langchain_core.tools import BaseTool, tool
from langgraph.types import Command
from typer.testing import CliRunner

from retryctl.audit import verify_log
from retryctl.cli import app
from retryctl.controller import Budget, Policy, ValidatorResult
from retryctl.middleware import RetryController
from tests.middleware._scripted import ScriptedChat, call, say
from tests.middleware._support import (
    Agent,
    ano_wait,
    last_ai,
    multiply,
    multiply_backup,
    records,
    tool_messages,
)


@tool
def broken_multiply(a: float, b: float) -> float:
    """Multiply two numbers (this one is broken)."""
    raise RuntimeError("multiplier crashed")


def _flaky(times: int) -> tuple[BaseTool, list[int]]:
    """A ``multiply`` that fails with a transient fault ``times`` times first, and its call count."""
    calls = [0]

    @tool
    def multiply(a: float, b: float) -> float:
        """Multiply two numbers."""
        calls[0] += 1
        if calls[0] <= times:
            raise ConnectionError("connection reset by peer")
        return a * b

    return multiply, calls


def _controller(tmp_path: Path, waits: list[float], **kw: object) -> RetryController:
    return RetryController(
        log=tmp_path / "log.jsonl",
        sleep=waits.append,
        asleep=ano_wait,
        **kw,  # type: ignore[arg-type]
    )


class TestToolCalls:
    def test_failing_tool_switches_to_its_groups_backup(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[call("broken_multiply", {"a": 6, "b": 7}), say("42")])
        controller = _controller(tmp_path, [], groups={"arithmetic": [broken_multiply, multiply_backup]})
        # The agent is given only the broken tool: the backup comes in through the middleware's tools.
        out = Agent(model, [broken_multiply], controller, mode).ask("6 times 7?")
        (result,) = tool_messages(out)
        assert result.status == "success"
        assert result.content == "42.0"
        assert last_ai(out).content == "42"
        actions = [
            (r["target"], r["action"]) for r in records(tmp_path / "log.jsonl") if r["kind"] == "verdict"
        ]
        assert ("broken_multiply", "switch") in actions
        assert ("multiply_backup", "accept") in actions
        assert "multiply_backup" in model.bound[0]  # registered with the agent, offered to the model

    def test_group_member_given_by_name(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[call("broken_multiply", {"a": 2, "b": 3}), say("6")])
        controller = _controller(tmp_path, [], groups={"arithmetic": ["broken_multiply", multiply_backup]})
        out = Agent(model, [broken_multiply], controller, mode).ask("2 times 3?")
        assert [m.content for m in tool_messages(out)] == ["6.0"]

    def test_transient_fault_is_retried_with_backoff(self, tmp_path: Path, mode: str) -> None:
        flaky_multiply, calls = _flaky(times=2)
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7}), say("42")])
        waits: list[float] = []
        out = Agent(model, [flaky_multiply], _controller(tmp_path, waits), mode).ask("6 times 7?")
        assert [m.content for m in tool_messages(out)] == ["42.0"]
        assert calls == [3]
        actions = [r["action"] for r in records(tmp_path / "log.jsonl") if r["step_id"].startswith("tool:")]
        assert actions == ["retry", "retry", "accept"]
        if mode == "sync":
            assert len(waits) == 2 and all(w > 0 for w in waits)

    def test_budget_of_one_attempt_stops_with_a_message_naming_it(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7})])
        controller = _controller(tmp_path, [], budget=Budget(attempts=1))
        out = Agent(model, [multiply], controller, mode).ask("6 times 7?")
        (stopped,) = tool_messages(out)
        assert stopped.status == "error"
        assert "retryctl stopped this tool call" in str(stopped.content)
        assert "budget 'attempts' is spent (1 of 1)" in str(stopped.content)
        # The model is not called again: the agent ends saying which budget stopped it.
        final = last_ai(out)
        assert "retryctl stopped the agent" in str(final.content)
        assert "'attempts'" in str(final.content)
        assert len(model.seen) == 1

    def test_refine_sends_a_failed_check_back_to_the_model(self, tmp_path: Path, mode: str) -> None:
        def positive(content: str, args: dict[str, object]) -> ValidatorResult:
            return ValidatorResult("positive", float(content) > 0, f"got {content}")

        model = ScriptedChat(
            script=[call("multiply", {"a": -6, "b": 7}), call("multiply", {"a": 6, "b": 7}, "c2"), say("42")]
        )
        controller = _controller(tmp_path, [], validators={"multiply": [positive]})
        out = Agent(model, [multiply], controller, mode).ask("6 times 7?")
        first, second = tool_messages(out)
        assert first.status == "error" and "positive: got -42.0" in str(first.content)
        assert second.status == "success"

    def test_the_log_verifies(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[call("broken_multiply", {"a": 1, "b": 2}), say("2")])
        controller = _controller(tmp_path, [], groups={"arithmetic": [broken_multiply, multiply_backup]})
        Agent(model, [broken_multiply], controller, mode).ask("1 times 2?")
        report = verify_log(tmp_path / "log.jsonl")
        assert report.ok, report.error
        assert report.records == len(records(tmp_path / "log.jsonl")) >= 4
        audited = CliRunner().invoke(app, ["audit", str(tmp_path / "log.jsonl")])
        assert audited.exit_code == 0, audited.output
        assert "chain intact" in audited.output


def _asking(tmp_path: Path) -> RetryController:
    def never(content: str, args: dict[str, object]) -> ValidatorResult:
        return ValidatorResult("checked_by_hand", False, "this result needs a person")

    # No refine rounds and no alternative: a failed check goes straight to the person.
    policy = Policy(weights={"validators": 1.0}, max_refines=0, low_confidence=("ask_user",))
    return _controller(tmp_path, [], validators={"multiply": [never]}, policy=policy)


class TestAskUser:
    def test_pauses_and_resumes_with_a_hitl_approve(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7}), say("42")])
        agent = Agent(model, [multiply], _asking(tmp_path), mode)
        paused = agent.ask("6 times 7?")
        (question,) = paused["__interrupt__"]
        assert question.value["type"] == "retryctl.ask_user"
        assert question.value["tool_call_id"] == "c1"
        assert "checked_by_hand" in question.value["reason"]
        out = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}))
        (result,) = tool_messages(out)
        assert result.status == "success" and result.content == "42.0"
        assert last_ai(out).content == "42"

    def test_respond_answers_for_the_tool(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7}), say("forty-two")])
        agent = Agent(model, [multiply], _asking(tmp_path), mode)
        agent.ask("6 times 7?")
        out = agent.invoke(Command(resume={"type": "respond", "message": "forty-two"}))
        assert [m.content for m in tool_messages(out)] == ["forty-two"]

    def test_reject_stops_the_call(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7}), say("I could not multiply.")])
        agent = Agent(model, [multiply], _asking(tmp_path), mode)
        agent.ask("6 times 7?")
        out = agent.invoke(Command(resume={"type": "reject", "message": "no"}))
        (stopped,) = tool_messages(out)
        assert stopped.status == "error" and "the user chose to stop" in str(stopped.content)

    def test_retryctl_reply_and_a_bad_one(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7}), say("41")])
        agent = Agent(model, [multiply], _asking(tmp_path), mode)
        agent.ask("6 times 7?")
        again = agent.invoke(Command(resume={"action": "maybe"}))
        (question,) = again["__interrupt__"]
        assert "could not use the reply" in question.value["error"]
        out = agent.invoke(Command(resume={"action": "answer", "answer": "41"}))
        assert [m.content for m in tool_messages(out)] == ["41"]
        assert verify_log(tmp_path / "log.jsonl").ok
