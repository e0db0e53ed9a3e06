"""ControlledToolNode as a drop-in for LangGraph's ToolNode: ToolNode's signature and meaning, composed
with the controller's policy (issue 14). Outcomes are compared with a plain ``ToolNode`` run on the same
graph where ToolNode has an answer of its own."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import InjectedState, ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from pydantic import BaseModel
from typing_extensions import TypedDict

from retryctl.audit import DecisionLog, VerdictRecord, read_records
from retryctl.controller import Breaker, BreakerConfig
from retryctl.nodes import ControlledToolCalls, ControlledToolNode, verdict_of
from tests.nodes._support import Sleeps

Mode = str


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> Mode:
    return str(request.param)


def invoke(graph: Any, value: Any, mode: Mode, config: dict[str, Any] | None = None) -> Any:
    if mode == "sync":
        return graph.invoke(value, config)
    return asyncio.run(graph.ainvoke(value, config))


def graph_of(node: ToolNode, schema: Any = MessagesState, checkpointer: Any = None) -> Any:
    g = StateGraph(schema)
    g.add_node("tools", node)
    g.add_edge(START, "tools")
    g.add_edge("tools", END)
    return g.compile(checkpointer=checkpointer)


def calling(name: str, args: dict[str, Any], call_id: str = "c1") -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def outcome(node: ToolNode, name: str, args: dict[str, Any], mode: Mode) -> Any:
    """The messages a one-call step returns, or the exception it raised (type and text)."""
    try:
        out = invoke(graph_of(node), {"messages": [calling(name, args)]}, mode)
    except Exception as exc:
        return (type(exc), str(exc))
    # The graph gives each message a fresh id: compare everything else.
    return [m.model_copy(update={"id": None}) for m in out["messages"] if isinstance(m, ToolMessage)]


@tool
def divide(a: int, b: int) -> float:
    """Divide a by b."""
    return a / b


@tool
def needs_key(key: str) -> str:
    """Raise a KeyError: a bug in the tool."""
    raise KeyError(key)


def on_value_error(e: ValueError) -> str:
    return f"handled {type(e).__name__}"


HANDLERS: list[Any] = [
    True,
    False,
    "custom text",
    ZeroDivisionError,
    (KeyError, ZeroDivisionError),
    on_value_error,
    lambda e: f"seen: {e}",
]


class TestHandleToolErrors:
    """An error the controller has nothing to add to ends the call exactly as in ToolNode."""

    @pytest.mark.parametrize("flag", HANDLERS, ids=lambda f: getattr(f, "__name__", repr(f)))
    @pytest.mark.parametrize(
        ("name", "args"),
        [
            ("divide", {"a": 1, "b": 0}),  # a bug: ZeroDivisionError
            ("divide", {"a": "x", "b": 1}),  # bad arguments: ToolInvocationError
            ("needs_key", {"key": "k"}),  # KeyError
            ("divide", {"a": 6, "b": 3}),  # no error at all
            ("missing", {}),  # a tool the node does not have
        ],
        ids=["bug", "bad-args", "key-error", "ok", "unknown-tool"],
    )
    def test_the_outcome_is_toolnodes(self, flag: Any, name: str, args: dict[str, Any], mode: Mode) -> None:
        expected = outcome(ToolNode([divide, needs_key], handle_tool_errors=flag), name, args, mode)
        got = outcome(ControlledToolNode([divide, needs_key], handle_tool_errors=flag), name, args, mode)
        assert got == expected

    def test_the_default_is_toolnodes_default(self, mode: Mode) -> None:
        cases: list[tuple[str, dict[str, Any]]] = [
            ("divide", {"a": 1, "b": 0}),
            ("divide", {"a": "x", "b": 1}),
        ]
        for name, args in cases:
            assert outcome(ControlledToolNode([divide]), name, args, mode) == outcome(
                ToolNode([divide]), name, args, mode
            )
        [message] = outcome(ControlledToolNode([divide]), "divide", {"a": "x", "b": 1}, mode)
        assert message.status == "error" and "Please fix the error and try again" in message.content

    def test_a_transient_fault_is_retried_before_the_handling_applies(self, mode: Mode) -> None:
        tries: list[int] = []

        @tool
        def flaky() -> str:
            """Fail twice, then answer."""
            tries.append(1)
            if len(tries) < 3:
                raise ConnectionError("reset")
            return "fine"

        sleeps = Sleeps()
        node = ControlledToolNode([flaky], handle_tool_errors=False, sleep=sleeps, asleep=sleeps.asleep)
        [message] = outcome(node, "flaky", {}, mode)
        assert message.content == "fine" and len(tries) == 3
        info = verdict_of(message)
        assert info is not None and info["attempts"] == 3

    def test_a_broken_tool_in_a_group_is_switched_whatever_the_handling(self, mode: Mode) -> None:
        @tool
        def backup(key: str) -> str:
            """The backup of needs_key."""
            return f"value of {key}"

        node = ControlledToolNode([needs_key], groups={"keys": [needs_key, backup]}, handle_tool_errors=False)
        [message] = outcome(node, "needs_key", {"key": "k"}, mode)
        assert message.content == "value of k" and message.name == "needs_key"
        assert (verdict_of(message) or {}).get("served_by") == "backup"

    def test_a_tool_error_is_logged_as_the_verdict_it_ended_on(self, mode: Mode, tmp_path: Any) -> None:
        log = DecisionLog(tmp_path / "d.jsonl")
        node = ControlledToolNode([divide], handle_tool_errors=True, log=log)
        [message] = outcome(node, "divide", {"a": 1, "b": 0}, mode)
        assert message.content == "Error: ZeroDivisionError('division by zero')\n Please fix your mistakes."
        log.close()
        [record] = [r for r in read_records(tmp_path / "d.jsonl") if isinstance(r, VerdictRecord)]
        assert record.step_id == "tool:divide:c1" and record.action.value in ("refine", "stop")


@tool
def read_foo(state: Annotated[Any, InjectedState]) -> str:
    """Read foo from the state."""
    return str(state["foo"] if isinstance(state, dict) else state.foo)


class TypedState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    foo: str


class PydanticState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages]
    foo: str


@dataclasses.dataclass
class DataclassState:
    messages: Annotated[list[AnyMessage], add_messages]
    foo: str


class TestStateSchemas:
    @pytest.mark.parametrize("schema", [TypedState, PydanticState, DataclassState])
    def test_any_state_schema(self, schema: Any, mode: Mode) -> None:
        graph = graph_of(ControlledToolNode([read_foo]), schema)
        history = [HumanMessage("hi"), calling("read_foo", {})]
        out = invoke(graph, {"messages": history, "foo": "bar"}, mode)
        assert out["messages"][-1].content == "bar"

    @pytest.mark.parametrize("schema", [PydanticState, DataclassState])
    def test_refines_are_counted_in_any_schema(self, schema: Any, mode: Mode) -> None:
        @tool
        def strict(n: int) -> str:
            """Take a number."""
            return str(n)

        # An earlier error message of this tool in the same turn counts as a refine already spent.
        earlier = ToolMessage("bad", name="strict", tool_call_id="old", status="error")
        history = [
            HumanMessage("hi"),
            calling("strict", {"n": "x"}, "old"),
            earlier,
            calling("strict", {"n": "y"}),
        ]
        out = invoke(graph_of(ControlledToolNode([strict]), schema), {"messages": history, "foo": ""}, mode)
        assert out["messages"][-1].status == "error"  # ToolNode's message for bad arguments


class TestResultsPassThrough:
    def test_content_blocks_are_kept(self, mode: Mode) -> None:
        @tool
        def picture() -> list[dict[str, Any]]:
            """Return an image only."""
            return [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]

        [message] = outcome(ControlledToolNode([picture]), "picture", {}, mode)
        assert message.content == [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]

    def test_a_content_and_artifact_tools_artifact_is_kept(self, mode: Mode) -> None:
        @tool(response_format="content_and_artifact")
        def report() -> tuple[str, dict[str, Any]]:
            """Return text and an artifact."""
            return "done", {"rows": [1, 2]}

        [message] = outcome(ControlledToolNode([report]), "report", {}, mode)
        assert (message.content, message.artifact) == ("done", {"rows": [1, 2]})
        assert message == outcome(ToolNode([report]), "report", {}, mode)[0]

    def test_metadata_after_a_retry_overwrites_nothing(self, mode: Mode) -> None:
        tries: list[int] = []

        @tool(response_format="content_and_artifact")
        def flaky_report() -> tuple[str, dict[str, Any]]:
            """Fail once, then return text and an artifact."""
            tries.append(1)
            if len(tries) == 1:
                raise TimeoutError("slow")
            return "done", {"rows": [1]}

        sleeps = Sleeps()
        [message] = outcome(
            ControlledToolNode([flaky_report], sleep=sleeps, asleep=sleeps.asleep), "flaky_report", {}, mode
        )
        assert message.artifact == {"rows": [1]}
        assert message.response_metadata["retryctl"]["action"] == "accept"
        assert message.response_metadata["retryctl"]["attempts"] == 2

    def test_a_list_of_commands_and_messages_is_passed_on(self, mode: Mode) -> None:
        class State(MessagesState):
            count: int

        @tool
        def bump(tool_call_id: Annotated[str, InjectedToolCallId]) -> list[Command[Any] | ToolMessage]:
            """Update the count and answer."""
            return [Command(update={"count": 7}), ToolMessage("bumped", tool_call_id=tool_call_id)]

        out = invoke(
            graph_of(ControlledToolNode([bump]), State), {"messages": [calling("bump", {})], "count": 0}, mode
        )
        assert out["count"] == 7
        assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == ["bumped"]

    def test_a_command_is_passed_on(self, mode: Mode) -> None:
        @tool
        def handoff(tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
            """Answer through a Command."""
            return Command(update={"messages": [ToolMessage("handed", tool_call_id=tool_call_id)]})

        out = invoke(graph_of(ControlledToolNode([handoff])), {"messages": [calling("handoff", {})]}, mode)
        assert out["messages"][-1].content == "handed"


class TestJournalTurns:
    def test_a_reused_call_id_in_a_new_turn_runs_again(self, mode: Mode) -> None:
        runs: list[int] = []

        @tool
        def count(n: int) -> str:
            """Count the runs."""
            runs.append(n)
            return f"run {len(runs)}"

        graph = graph_of(ControlledToolNode([count]), checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        first = invoke(graph, {"messages": [calling("count", {"n": 1}, "same-id")]}, mode, config)
        second = invoke(graph, {"messages": [calling("count", {"n": 2}, "same-id")]}, mode, config)
        assert (first["messages"][-1].content, second["messages"][-1].content) == ("run 1", "run 2")
        assert runs == [1, 2]

    def test_a_resume_of_the_same_step_still_replays(self, mode: Mode) -> None:
        from langgraph.types import interrupt

        runs: list[str] = []

        @tool
        def done() -> str:
            """Finish at once."""
            runs.append("done")
            return "finished"

        @tool
        def asks() -> str:
            """Ask a person."""
            return str(interrupt("go on?"))

        graph = graph_of(ControlledToolNode([done, asks]), checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        calls = [{"name": "done", "args": {}, "id": "a"}, {"name": "asks", "args": {}, "id": "b"}]
        invoke(graph, {"messages": [AIMessage("", tool_calls=calls)]}, mode, config)
        out = invoke(graph, Command(resume="yes"), mode, config)
        assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == ["finished", "yes"]
        assert runs == ["done"]  # finished before the interrupt: replayed from the journal


class TestWrapperComposition:
    def test_the_callers_wrapper_is_outermost(self, mode: Mode) -> None:
        tries: list[int] = []

        @tool
        def flaky(x: int) -> str:
            """Fail once, then echo."""
            tries.append(x)
            if len(tries) == 1:
                raise ConnectionError("reset")
            return f"got {x}"

        seen: list[Any] = []

        def wrapper(request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]) -> Any:
            seen.append(request.tool_call["args"])
            result = execute(request.override(tool_call={**request.tool_call, "args": {"x": 5}}))
            seen.append(result.content)
            return result

        sleeps = Sleeps()
        node = ControlledToolNode([flaky], wrap_tool_call=wrapper, sleep=sleeps, asleep=sleeps.asleep)
        [message] = outcome(node, "flaky", {"x": 1}, mode)
        # One execute of the wrapper = one whole controlled call: the retry happened inside it.
        assert seen == [{"x": 1}, "got 5"] and tries == [5, 5]
        assert message.content == "got 5"

    def test_a_wrapper_that_runs_execute_twice_gets_two_runs(self, mode: Mode) -> None:
        runs: list[int] = []

        @tool
        def count() -> str:
            """Count the runs."""
            runs.append(1)
            return f"run {len(runs)}"

        def twice(request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]) -> Any:
            execute(request)
            return execute(request)

        graph = graph_of(ControlledToolNode([count], wrap_tool_call=twice), checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        out = invoke(graph, {"messages": [calling("count", {})]}, mode, config)
        assert out["messages"][-1].content == "run 2" and len(runs) == 2

    def test_an_async_wrapper_composes_under_ainvoke(self) -> None:
        order: list[str] = []

        async def awrapper(request: ToolCallRequest, execute: Any) -> Any:
            order.append("before")
            result = await execute(request)
            order.append(f"after {result.content}")
            return result

        node = ControlledToolNode([divide], awrap_tool_call=awrapper)
        [message] = outcome(node, "divide", {"a": 6, "b": 3}, "async")
        assert message.content == "2.0" and order == ["before", "after 2.0"]

    def test_a_wrappers_error_is_handled_as_toolnode_handles_it(self, mode: Mode) -> None:
        def wrapper(request: ToolCallRequest, execute: Any) -> Any:
            raise ToolException("wrapper refused")

        for flag in (True, False):
            assert outcome(
                ControlledToolNode([divide], wrap_tool_call=wrapper, handle_tool_errors=flag),
                "divide",
                {"a": 1, "b": 1},
                mode,
            ) == outcome(
                ToolNode([divide], wrap_tool_call=wrapper, handle_tool_errors=flag),
                "divide",
                {"a": 1, "b": 1},
                mode,
            )

    def test_a_tool_the_wrapper_puts_in_is_run(self, mode: Mode) -> None:
        @tool
        def hidden(x: int) -> str:
            """Known only to the wrapper."""
            return f"hidden {x}"

        def wrapper(request: ToolCallRequest, execute: Any) -> Any:
            return execute(request.override(tool=hidden))

        [message] = outcome(ControlledToolNode([divide], wrap_tool_call=wrapper), "hidden", {"x": 3}, mode)
        assert message.content == "hidden 3"


class TestEvents:
    def test_the_custom_stream_carries_only_the_tools_events_by_default(self) -> None:
        from langgraph.config import get_stream_writer

        @tool
        def chatty() -> str:
            """Write one custom event."""
            get_stream_writer()({"from": "tool"})
            return "ok"

        call = {"messages": [calling("chatty", {})]}
        quiet = list(graph_of(ControlledToolNode([chatty])).stream(call, stream_mode="custom"))
        assert quiet == [{"from": "tool"}]
        loud = list(
            graph_of(ControlledToolNode([chatty], stream_events=True)).stream(call, stream_mode="custom")
        )
        assert loud[0] == {"from": "tool"} and loud[1]["type"] == "retryctl.verdict"


class TestControlledToolCalls:
    def test_it_runs_a_request_without_a_node(self) -> None:
        breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=60))

        @tool
        def primary(x: int) -> str:
            """Always down."""
            raise ConnectionError("down")

        @tool
        def secondary(x: int) -> str:
            """The backup."""
            return f"secondary {x}"

        calls = ControlledToolCalls([primary], groups={"g": [primary, secondary]}, breaker=breaker)
        executed: list[str] = []

        def execute(request: ToolCallRequest) -> ToolMessage:
            assert request.tool is not None
            executed.append(request.tool.name)
            content = request.tool.invoke(request.tool_call["args"])
            return ToolMessage(content, name=request.tool.name, tool_call_id=request.tool_call["id"])

        request = ToolCallRequest(
            tool_call={"name": "primary", "args": {"x": 2}, "id": "c1", "type": "tool_call"},
            tool=primary,
            state={"messages": []},
            runtime=None,  # type: ignore[arg-type]
        )
        message = calls.wrap(request, execute)
        assert isinstance(message, ToolMessage) and message.content == "secondary 2"
        assert executed == ["primary", "secondary"]
        assert (verdict_of(message) or {}).get("served_by") == "secondary"

    def test_groups_name_tools_it_was_given(self) -> None:
        from retryctl.exceptions import ConfigError

        with pytest.raises(ConfigError) as info:
            ControlledToolCalls([divide], groups={"g": ["divide", "nowhere"]})
        assert info.value.field == "groups['g']" and info.value.value == "nowhere"
