"""``retry_on=`` and ``classify=`` reach the decision in ControlledToolNode and ControlledStep, on real
exceptions of a real client (``requests`` against a local server that hangs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool, StructuredTool, tool

from retryctl.controller import ErrorClass, Policy
from retryctl.exceptions import ConfigError
from retryctl.models import LangChainBackend
from retryctl.nodes import ControlledStep, ControlledToolNode
from retryctl.testing import ScriptedBackend
from tests.controller._clients import TIMEOUT_S, raised
from tests.models._fault_server import FaultServer, hang
from tests.nodes._support import Runner, Sleeps, StreamingToolNode, user
from tests.nodes.test_tool_node import calling, graph_of, tool_messages

ONE: dict[str, Any] = {"stopping": "sc-1", "min_samples": 1, "max_samples": 1}


@pytest.fixture
def server() -> Iterator[FaultServer]:
    served = FaultServer().start()
    yield served
    served.stop()


def read_timeout(server: FaultServer) -> requests.ReadTimeout:
    """A real ``requests.ReadTimeout``: the server hangs past the client's read timeout."""
    server.script.append(hang())
    exc = raised(lambda: requests.get(server.url, timeout=TIMEOUT_S))
    assert isinstance(exc, requests.ReadTimeout)
    return exc


def fetcher(server: FaultServer, name: str = "fetch") -> BaseTool:
    def fetch(path: str) -> str:
        """Fetch a page of the service."""
        return str(requests.get(f"{server.url}{path}", timeout=TIMEOUT_S).status_code)

    return StructuredTool.from_function(fetch, name=name)


class TestToolNode:
    def test_a_requests_timeout_is_retried(self, run: Runner, server: FaultServer) -> None:
        server.script.append(hang())
        sleeps = Sleeps()
        node = StreamingToolNode([fetcher(server)], sleep=sleeps, asleep=sleeps.asleep)
        out = run(graph_of(node), calling(("fetch", {"path": "/a"})))
        assert out.actions == ["retry", "accept"]
        assert "no response within the read timeout" in out.verdicts[0]["verdict"]["reason"]
        assert [m.content for m in tool_messages(out)] == ["200"]
        assert len(server.requests) == 2

    def test_retry_on_that_does_not_match_is_not_retried(self, run: Runner, server: FaultServer) -> None:
        server.script.append(hang())
        node = StreamingToolNode([fetcher(server)], retry_on=(ValueError,), handle_tool_errors=True)
        out = run(graph_of(node), calling(("fetch", {"path": "/a"})))
        assert "retry" not in out.actions
        [message] = tool_messages(out)
        assert message.status == "error" and "Read timed out" in str(message.content)
        assert len(server.requests) == 1

    def test_an_unmatched_fault_still_switches_within_its_group(
        self, run: Runner, server: FaultServer
    ) -> None:
        server.script.append(hang())
        fetch, backup = fetcher(server), fetcher(server, "fetch_backup")
        node = StreamingToolNode([fetch], groups={"fetch": [fetch, backup]}, retry_on=(ValueError,))
        out = run(graph_of(node), calling(("fetch", {"path": "/a"})))
        assert out.actions == ["switch", "accept"]

    def test_retry_on_a_predicate(self, run: Runner, server: FaultServer) -> None:
        calls: list[int] = []

        @tool
        def lookup(key: str) -> str:
            """Look a key up."""
            calls.append(1)
            if len(calls) == 1:
                raise KeyError(key)  # unrecognised: terminal, unless retry_on says otherwise
            return "found"

        sleeps = Sleeps()
        node = StreamingToolNode(
            [lookup], retry_on=lambda exc: isinstance(exc, KeyError), sleep=sleeps, asleep=sleeps.asleep
        )
        out = run(graph_of(node), calling(("lookup", {"key": "k"})))
        assert out.actions == ["retry", "accept"] and len(calls) == 2

    def test_a_classify_hook_decides(self, run: Runner, server: FaultServer) -> None:
        server.script.append(hang())
        node = StreamingToolNode(
            [fetcher(server)],
            classify=lambda exc: ErrorClass.TERMINAL if isinstance(exc, requests.Timeout) else None,
            handle_tool_errors=True,
        )
        out = run(graph_of(node), calling(("fetch", {"path": "/a"})))
        assert "retry" not in out.actions and len(server.requests) == 1
        assert "classify hook" in out.verdicts[-1]["verdict"]["reason"]

    @pytest.mark.parametrize(
        ("kwargs", "field"), [({"retry_on": "ReadTimeout"}, "retry_on"), ({"classify": 3}, "classify")]
    )
    def test_bad_rules_are_named_at_construction(self, kwargs: dict[str, Any], field: str) -> None:
        with pytest.raises(ConfigError) as info:
            ControlledToolNode(
                [StructuredTool.from_function(lambda: "x", name="noop", description="x")], **kwargs
            )
        assert info.value.field == field


class _FlakyChat(GenericFakeChatModel):
    """A chat model whose client raises ``faults`` first (then answers from ``messages``)."""

    faults: list[Any]

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        if self.faults:
            raise self.faults.pop(0)
        return super()._generate(*args, **kwargs)


class TestStep:
    def test_a_requests_timeout_is_retried(self, run: Runner, server: FaultServer) -> None:
        sleeps = Sleeps()
        backend = ScriptedBackend([read_timeout(server), "42"])
        out = run(
            ControlledStep(backend, policy=Policy(**ONE), sleep=sleeps, asleep=sleeps.asleep).compile(),
            user("q"),
        )
        assert out.actions == ["retry", "accept"]

    def test_a_chat_models_client_error_is_judged_by_what_it_is(
        self, run: Runner, server: FaultServer
    ) -> None:
        # LangChainBackend does not know requests' errors: the controller judges the error it wraps.
        chat = _FlakyChat(messages=iter([AIMessage("42")]), faults=[read_timeout(server)])
        sleeps = Sleeps()
        step = ControlledStep(
            LangChainBackend(chat), policy=Policy(**ONE), sleep=sleeps, asleep=sleeps.asleep
        )
        out = run(step.compile(), user("q"))
        assert out.actions == ["retry", "accept"]
        assert "ReadTimeout" in out.verdicts[0]["verdict"]["reason"]

    def test_retry_on_that_does_not_match_switches(self, run: Runner, server: FaultServer) -> None:
        first = ScriptedBackend([read_timeout(server)], model="a")
        second = ScriptedBackend(["42"], model="b")
        step = ControlledStep([first, second], policy=Policy(**ONE), retry_on=(ValueError,))
        out = run(step.compile(), user("q"))
        assert out.actions == ["switch", "accept"]
        assert "retry_on does not match" in out.verdicts[0]["verdict"]["reason"]

    def test_retry_on_the_wrapped_error(self, run: Runner, server: FaultServer) -> None:
        chat = _FlakyChat(messages=iter([AIMessage("42")]), faults=[read_timeout(server)])
        sleeps = Sleeps()
        step = ControlledStep(
            LangChainBackend(chat),
            policy=Policy(**ONE),
            retry_on=(requests.ReadTimeout,),
            sleep=sleeps,
            asleep=sleeps.asleep,
        )
        assert run(step.compile(), user("q")).actions == ["retry", "accept"]

    def test_a_classify_hook_decides(self, run: Runner) -> None:
        sleeps = Sleeps()
        backend = ScriptedBackend([KeyError("cache miss"), "42"])
        step = ControlledStep(
            backend,
            policy=Policy(**ONE),
            classify=lambda exc: ErrorClass.TRANSIENT if isinstance(exc, KeyError) else None,
            sleep=sleeps,
            asleep=sleeps.asleep,
        )
        assert run(step.compile(), user("q")).actions == ["retry", "accept"]

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [({"retry_on": [ValueError, 1]}, "retry_on[1]"), ({"classify": "transient"}, "classify")],
    )
    def test_bad_rules_are_named_at_construction(self, kwargs: dict[str, Any], field: str) -> None:
        with pytest.raises(ConfigError) as info:
            ControlledStep(ScriptedBackend(["42"]), **kwargs)
        assert info.value.field == field
