"""ControlledToolNode, the ToolNode drop-in: every verdict of a tool call through real graph execution."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode
from langgraph.types import Command

from retryctl.audit import DecisionLog, VerdictRecord, read_records
from retryctl.controller import Breaker, BreakerConfig, Budget, Ledger, ManualClock, Policy, ValidatorResult
from retryctl.exceptions import ConfigError
from retryctl.nodes import ControlledToolNode, StepResult, verdict_of
from tests.nodes._support import RateLimited, Runner, Sleeps, StreamingToolNode


class State(MessagesState):
    result: StepResult | None


def graph_of(node: ControlledToolNode, checkpointer: Any = None) -> Any:
    g = StateGraph(State)
    g.add_node("tools", node)
    g.add_edge(START, "tools")
    g.add_edge("tools", END)
    return g.compile(checkpointer=checkpointer)


def calling(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    tool_calls = [{"name": n, "args": a, "id": f"call-{i}"} for i, (n, a) in enumerate(calls)]
    return {"messages": [HumanMessage("go"), AIMessage(content="", tool_calls=tool_calls)]}


def tool_messages(out: Any) -> list[ToolMessage]:
    return [m for m in out.output["messages"] if isinstance(m, ToolMessage)]


class Calls:
    """Tools that record their calls and fail as scripted."""

    def __init__(self) -> None:
        self.log: list[tuple[str, dict[str, Any]]] = []

    def calculator(self, faults: list[Exception] | None = None, result: str = "42") -> BaseTool:
        pending = list(faults or [])

        @tool
        def calculator(expression: str) -> str:
            """Evaluate an arithmetic expression."""
            self.log.append(("calculator", {"expression": expression}))
            if pending:
                raise pending.pop(0)
            return result

        return calculator

    def python(self) -> BaseTool:
        @tool
        def python(code: str) -> str:
            """Run Python code and return what it prints."""
            self.log.append(("python", {"code": code}))
            return "42"

        return python

    def names(self) -> list[str]:
        return [name for name, _ in self.log]


def non_negative(content: str, args: dict[str, Any]) -> ValidatorResult:
    return ValidatorResult("non_negative", float(content) >= 0, f"result {content} of {args} is < 0")


class TestControlledToolNode:
    def test_is_a_tool_node(self) -> None:
        assert isinstance(StreamingToolNode([Calls().calculator()]), ToolNode)

    def test_accept(self, run: Runner) -> None:
        calls = Calls()
        out = run(
            graph_of(StreamingToolNode([calls.calculator()])), calling(("calculator", {"expression": "6*7"}))
        )
        [message] = tool_messages(out)
        assert message.content == "42"
        assert message.status == "success"
        assert verdict_of(message) is None  # a first-try accept is left as the tool returned it
        assert out.actions == ["accept"]

    def test_refine_names_the_failing_check_and_evidence(self, run: Runner) -> None:
        calls = Calls()
        node = StreamingToolNode([calls.calculator(result="-5")], validators={"calculator": [non_negative]})
        out = run(graph_of(node), calling(("calculator", {"expression": "2-7"})))
        [message] = tool_messages(out)
        assert message.status == "error"
        assert "non_negative" in message.content
        assert "result -5 of {'expression': '2-7'} is < 0" in message.content
        assert out.actions == ["refine"]

    def test_invalid_arguments_are_refined_before_the_call(self, run: Runner) -> None:
        calls = Calls()
        out = run(graph_of(StreamingToolNode([calls.calculator()])), calling(("calculator", {"expr": "1+1"})))
        [message] = tool_messages(out)
        assert out.actions == ["refine"]
        assert calls.log == []
        assert "expression" in message.content and "Field required" in message.content
        assert "Traceback" not in message.content

    def test_a_failing_validator_never_leaks_a_traceback(self, run: Runner) -> None:
        def parses(content: str, args: dict[str, Any]) -> bool:
            return int(content) > 0  # raises ValueError on "4.5"

        node = StreamingToolNode([Calls().calculator(result="4.5")], validators={"calculator": [parses]})
        [message] = tool_messages(run(graph_of(node), calling(("calculator", {"expression": "9/2"}))))
        assert "parses: ValueError: invalid literal for int()" in message.content
        assert "Traceback" not in message.content

    def test_retry_honours_retry_after(self, run: Runner) -> None:
        calls, sleeps = Calls(), Sleeps()
        node = StreamingToolNode([calls.calculator([RateLimited("7")])], sleep=sleeps, asleep=sleeps.asleep)
        out = run(graph_of(node), calling(("calculator", {"expression": "6*7"})))
        assert out.actions == ["retry", "accept"]
        assert sleeps.waits == [7.0]
        assert calls.names() == ["calculator", "calculator"]

    def test_switch_when_the_breaker_opens(self, run: Runner) -> None:
        calls, sleeps = Calls(), Sleeps()
        breaker = Breaker(BreakerConfig(failure_threshold=2, cooldown_s=60), clock=ManualClock())
        calculator = calls.calculator([ConnectionError("down")] * 5)
        node = StreamingToolNode(
            [calculator],
            groups={"arithmetic": [calculator, calls.python()]},
            adapters={"python": lambda args: {"code": f"print({args['expression']})"}},
            breaker=breaker,
            sleep=sleeps,
            asleep=sleeps.asleep,
        )
        out = run(graph_of(node), calling(("calculator", {"expression": "6*7"})))
        # First fault: breaker closed (1 of 2) → retry. Second: the breaker opens → switch to python.
        assert out.actions == ["retry", "switch", "accept"]
        assert calls.log == [
            ("calculator", {"expression": "6*7"}),
            ("calculator", {"expression": "6*7"}),
            ("python", {"code": "print(6*7)"}),
        ]
        [message] = tool_messages(out)
        assert message.name == "calculator"  # the model asked for calculator; its call id is answered
        assert (verdict_of(message) or {}).get("served_by") == "python"

    def test_an_open_breaker_is_skipped_without_a_call(self, run: Runner) -> None:
        calls = Calls()
        breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=60), clock=ManualClock())
        breaker.record_failure("calculator")
        calculator = calls.calculator()
        node = StreamingToolNode(
            [calculator],
            groups={"arithmetic": [calculator, calls.python()]},
            adapters={"python": lambda args: {"code": args["expression"]}},
            breaker=breaker,
        )
        out = run(graph_of(node), calling(("calculator", {"expression": "6*7"})))
        assert out.actions == ["switch", "accept"]
        assert calls.names() == ["python"]

    def test_stop_when_the_budget_is_spent(self, run: Runner) -> None:
        calls = Calls()
        node = StreamingToolNode(
            [calls.calculator()], run_ledger=Ledger(Budget(attempts=0)), result_key="result"
        )
        out = run(graph_of(node), calling(("calculator", {"expression": "1"})))
        assert out.actions == ["stop"]
        assert calls.log == []
        [message] = tool_messages(out)
        assert message.status == "error"
        assert message.text.startswith("retryctl stopped this tool call: run budget 'attempts' is spent")
        assert out.output["result"]["status"] == "stopped"

    def test_refines_are_counted_across_turns(self, run: Runner) -> None:
        node = StreamingToolNode(
            [Calls().calculator(result="-1")],
            validators={"calculator": [non_negative]},
            policy=Policy(weights={"validators": 1.0}, max_refines=1, low_confidence=("stop",)),
        )
        state = calling(("calculator", {"expression": "0-1"}))
        earlier = ToolMessage(
            "bad", name="calculator", tool_call_id="old", response_metadata={"retryctl": {"action": "refine"}}
        )
        state["messages"].insert(1, earlier)
        out = run(graph_of(node), state)
        assert out.actions == ["stop"]


class TestToolAskUser:
    def node(self, calls: Calls, **kwargs: Any) -> ControlledToolNode:
        policy = Policy(weights={"validators": 1.0}, max_refines=0)
        return StreamingToolNode(
            [calls.calculator(result="-5")],
            validators={"calculator": [non_negative]},
            policy=policy,
            **kwargs,
        )

    @pytest.mark.parametrize(
        ("reply", "content", "status", "logged"),
        [
            ({"action": "accept"}, "-5", "success", "accept"),
            ("-3", "-3", "success", "accept"),
            ({"action": "stop"}, None, "error", "stop"),
        ],
    )
    def test_resume(self, run: Runner, reply: Any, content: str | None, status: str, logged: str) -> None:
        calls = Calls()
        graph = graph_of(self.node(calls), InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        first = run(graph, calling(("calculator", {"expression": "2-7"})), config)
        assert first.actions == ["ask_user"]
        assert first.interrupts[0].value["best"]["answer"] == "-5"
        out = run(graph, Command(resume=reply), config)
        [message] = tool_messages(out)
        assert message.status == status
        if content is not None:
            assert message.content == content
        # The ask_user verdict is not decided (nor logged) twice on resume; the user's answer is, once.
        assert out.actions == [logged]
        assert out.verdicts[0]["extra"]["decided_by"] == "user"
        assert calls.names() == ["calculator"]

    def test_the_users_answer_ends_the_calls_log_and_serves_it(self, run: Runner, tmp_path: Any) -> None:
        path = tmp_path / "log.jsonl"
        config = {"configurable": {"thread_id": "t"}}
        with DecisionLog(path) as log:
            graph = graph_of(self.node(Calls(), log=log, result_key="result"), InMemorySaver())
            run(graph, calling(("calculator", {"expression": "2-7"})), config)
            out = run(graph, Command(resume="-3"), config)
        asked, answered = [r for r in read_records(path) if isinstance(r, VerdictRecord)]
        assert (asked.action.value, answered.action.value) == ("ask_user", "accept")
        assert (answered.target, answered.answer, answered.reason) == ("user", "-3", "answered by the user")
        assert answered.attempt == asked.attempt and answered.step_id == asked.step_id
        reply = {"action": "answer", "answer": "-3", "budget": {}}
        assert answered.extra == {"decided_by": "user", "reply": reply}
        [message] = tool_messages(out)
        assert (verdict_of(message) or {}).get("served_by") == "user"
        assert (verdict_of(message) or {}).get("action") == "accept"
        assert out.output["result"]["served_by"] == "user"


class TestNonIdempotent:
    def charge_tool(self, log: list[str]) -> BaseTool:
        @tool
        def charge(amount: int) -> str:
            """Charge a card (not safe to repeat)."""
            log.append(f"charged {amount}")
            return str(-amount)  # the validator rejects it, so the call ends in ask_user

        charge.metadata = {"idempotent": False}
        return charge

    def test_not_run_again_when_the_user_extends(self, run: Runner) -> None:
        log: list[str] = []
        policy = Policy(weights={"validators": 1.0}, max_refines=0)
        node = StreamingToolNode(
            [self.charge_tool(log)], validators={"charge": [non_negative]}, policy=policy
        )
        graph = graph_of(node, InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        run(graph, calling(("charge", {"amount": 5})), config)
        # "extend" runs another attempt of the same call: its recorded result is judged again instead.
        again = run(graph, Command(resume={"action": "extend", "budget": {"attempts": 1}}), config)
        assert again.interrupted
        assert again.actions == ["retry", "ask_user"]  # the user's extension, then the new verdict
        done = run(graph, Command(resume={"action": "accept"}), config)
        assert tool_messages(done)[0].content == "-5"
        assert log == ["charged 5"]

    def test_a_finished_call_is_not_repeated_when_a_sibling_asks(self) -> None:
        log: list[str] = []

        @tool
        def send_email(to: str) -> str:
            """Send an e-mail (not safe to repeat)."""
            log.append(to)
            return "sent"

        send_email.metadata = {"idempotent": False}
        calls = Calls()
        policy = Policy(weights={"validators": 1.0}, max_refines=0)
        node = StreamingToolNode(
            [send_email, calls.calculator(result="-5")],
            validators={"calculator": [non_negative]},
            policy=policy,
        )
        graph = graph_of(node, InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        from retryctl.testing import capture_verdicts

        first = capture_verdicts(
            graph,
            calling(("send_email", {"to": "a@example.org"}), ("calculator", {"expression": "2-7"})),
            config,
        )
        assert first.interrupted
        done = capture_verdicts(graph, Command(resume={"action": "accept"}), config)
        assert [m.content for m in tool_messages(done)] == ["sent", "-5"]
        assert log == ["a@example.org"]


class TestConfig:
    def test_policy_must_weigh_validators(self) -> None:
        with pytest.raises(ConfigError, match=r"policy\.weights"):
            StreamingToolNode([Calls().calculator()], policy=Policy())

    def test_a_tool_in_two_groups_is_rejected(self) -> None:
        calc = Calls().calculator()
        with pytest.raises(ConfigError, match="groups"):
            StreamingToolNode([calc], groups={"a": [calc], "b": [calc]})

    def test_validators_must_name_known_tools(self) -> None:
        with pytest.raises(ConfigError, match="validators"):
            StreamingToolNode([Calls().calculator()], validators={"nope": [non_negative]})


class TestRegistry:
    def test_from_registry_switches_within_its_group(self, run: Runner) -> None:
        from retryctl.tools import CalculatorTool, ToolRegistry

        calls = Calls()
        registry = ToolRegistry(
            [CalculatorTool(), calls.python()], groups={"arithmetic": ["calculator", "python"]}
        )
        breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=60), clock=ManualClock())
        breaker.record_failure("calculator")
        node = StreamingToolNode.from_registry(
            registry, adapters={"python": lambda a: {"code": f"print({a['expression']})"}}, breaker=breaker
        )
        out = run(graph_of(node), calling(("calculator", {"expression": "6*7"})))
        assert out.actions == ["switch", "accept"]
        assert calls.log == [("python", {"code": "print(6*7)"})]

    def test_an_error_the_tool_reports_is_refined_with_its_message(self, run: Runner) -> None:
        from retryctl.tools import CalculatorTool

        out = run(
            graph_of(StreamingToolNode([CalculatorTool()])), calling(("calculator", {"expression": "6 *"}))
        )
        [message] = tool_messages(out)
        assert out.actions == ["refine"]
        assert "calculator error" in message.content
        assert message.status == "error"


class TestToolBudget:
    def test_exhaustion_asks_to_extend_and_the_call_runs(self, run: Runner) -> None:
        calls = Calls()
        policy = Policy(weights={"validators": 1.0}, on_budget_exhausted="ask_user")
        node = StreamingToolNode([calls.calculator()], run_ledger=Ledger(Budget(attempts=0)), policy=policy)
        graph = graph_of(node, InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        first = run(graph, calling(("calculator", {"expression": "6*7"})), config)
        assert first.actions == ["ask_user"]
        assert "'attempts' is spent" in first.interrupts[0].value["reason"]
        assert calls.log == []
        out = run(graph, Command(resume={"action": "extend", "budget": {"attempts": 1}}), config)
        assert tool_messages(out)[0].content == "42"
        assert out.actions == ["retry", "accept"]  # the user's extension is logged, then the call's verdict
        assert calls.names() == ["calculator"]


class TestToolNodeCompatibility:
    def test_an_unknown_tool_gets_toolnodes_own_error(self, run: Runner) -> None:
        out = run(graph_of(StreamingToolNode([Calls().calculator()])), calling(("nope", {})))
        [message] = tool_messages(out)
        assert message.status == "error"
        assert "nope is not a valid tool" in message.text
        assert out.actions == []

    def test_injected_state_is_not_mistaken_for_a_missing_argument(self, run: Runner) -> None:
        @tool
        def count_messages(prefix: str, state: Annotated[dict[str, Any], InjectedState]) -> str:
            """Count the conversation's messages."""
            return f"{prefix}{len(state['messages'])}"

        out = run(
            graph_of(StreamingToolNode([count_messages])), calling(("count_messages", {"prefix": "n="}))
        )
        assert tool_messages(out)[0].content == "n=2"
        assert out.actions == ["accept"]

    def test_a_command_returned_by_a_tool_is_passed_on(self, run: Runner) -> None:
        @tool
        def remember(fact: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
            """Store a fact in the state."""
            message = ToolMessage("stored", tool_call_id=tool_call_id)
            return Command(update={"messages": [message], "result": {"status": "accepted", "answer": fact}})

        out = run(graph_of(StreamingToolNode([remember])), calling(("remember", {"fact": "sky is blue"})))
        assert out.actions == ["accept"]
        assert out.output["result"]["answer"] == "sky is blue"
        assert tool_messages(out)[0].content == "stored"


class TestToolEvents:
    def test_every_verdict_is_logged_and_streamed(self, run: Runner, tmp_path: Any) -> None:
        from retryctl.audit import DecisionLog, VerdictRecord, read_records, verify_log

        calls, sleeps = Calls(), Sleeps()
        path = tmp_path / "tools.jsonl"
        with DecisionLog(path) as log:
            node = StreamingToolNode(
                [calls.calculator([TimeoutError("slow")])], log=log, sleep=sleeps, asleep=sleeps.asleep
            )
            out = run(
                graph_of(node),
                calling(("calculator", {"expression": "1+1"})),
                {"configurable": {"run_id": "r9"}},
            )
        records = [r for r in read_records(path) if isinstance(r, VerdictRecord)]
        assert [r.action.value for r in records] == out.actions == ["retry", "accept"]
        assert {(r.run_id, r.step_id) for r in records} == {("r9", "tool:calculator:call-0")}
        assert [r.attempt for r in records] == [1, 2]
        assert verify_log(path).ok
