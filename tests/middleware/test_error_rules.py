"""``retry_on=`` and ``classify=`` reach RetryController's decisions on tool calls and model calls, on real
exceptions of real clients (``requests`` against a local server that hangs, and a closed port)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from langchain_core.tools import BaseTool, tool

from retryctl.controller import ErrorClass
from retryctl.exceptions import ConfigError
from retryctl.middleware import RetryController
from tests.controller._clients import TIMEOUT_S, closed_port, raised
from tests.middleware._scripted import ScriptedChat, call, say
from tests.middleware._support import Agent, ano_wait, last_ai, records, tool_messages
from tests.models._fault_server import FaultServer, hang


@pytest.fixture
def server() -> Iterator[FaultServer]:
    served = FaultServer().start()
    yield served
    served.stop()


def _fetcher(server: FaultServer) -> BaseTool:
    @tool
    def fetch(path: str) -> str:
        """Fetch a page of the service."""
        return str(requests.get(f"{server.url}{path}", timeout=TIMEOUT_S).status_code)

    return fetch


def _controller(tmp_path: Path, **kw: Any) -> RetryController:
    return RetryController(log=tmp_path / "log.jsonl", sleep=lambda s: None, asleep=ano_wait, **kw)


def _actions(tmp_path: Path, prefix: str) -> list[str]:
    rows = records(tmp_path / "log.jsonl")
    return [r["action"] for r in rows if r["kind"] == "verdict" and r["step_id"].startswith(prefix)]


def _refused() -> requests.ConnectionError:
    """A real ``requests.ConnectionError``: nobody listens on the port."""
    exc = raised(lambda: requests.get(f"http://127.0.0.1:{closed_port()}/", timeout=TIMEOUT_S))
    assert isinstance(exc, requests.ConnectionError)
    return exc


class TestToolCalls:
    def test_a_requests_timeout_is_retried(self, tmp_path: Path, mode: str, server: FaultServer) -> None:
        server.script.append(hang())
        model = ScriptedChat(script=[call("fetch", {"path": "/a"}), say("done")])
        out = Agent(model, [_fetcher(server)], _controller(tmp_path), mode).ask("fetch /a")
        assert [m.content for m in tool_messages(out)] == ["200"]
        assert _actions(tmp_path, "tool:") == ["retry", "accept"]
        assert len(server.requests) == 2

    def test_retry_on_that_does_not_match_is_not_retried(
        self, tmp_path: Path, mode: str, server: FaultServer
    ) -> None:
        server.script.append(hang())
        model = ScriptedChat(script=[call("fetch", {"path": "/a"}), say("it failed")])
        controller = _controller(tmp_path, retry_on=(ValueError,))
        out = Agent(model, [_fetcher(server)], controller, mode).ask("fetch /a")
        [message] = tool_messages(out)
        assert message.status == "error" and "Read timed out" in str(message.content)
        assert "retry" not in _actions(tmp_path, "tool:")
        assert len(server.requests) == 1


class TestModelCalls:
    def test_a_requests_connection_error_is_retried(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[_refused(), say("hello")])
        out = Agent(model, [], _controller(tmp_path), mode).ask("hi")
        assert last_ai(out).content == "hello"
        assert _actions(tmp_path, "model:") == ["retry", "accept"]

    def test_retry_on_that_does_not_match_ends_the_agent(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[_refused(), say("never")])
        controller = _controller(tmp_path, retry_on=(TimeoutError,))
        out = Agent(model, [], controller, mode).ask("hi")
        assert "retryctl stopped the agent" in str(last_ai(out).content)
        assert len(model.seen) == 1
        assert "retry" not in _actions(tmp_path, "model:")

    def test_a_classify_hook_decides(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[KeyError("cache miss"), say("hello")])
        controller = _controller(
            tmp_path, classify=lambda exc: ErrorClass.TRANSIENT if isinstance(exc, KeyError) else None
        )
        out = Agent(model, [], controller, mode).ask("hi")
        assert last_ai(out).content == "hello"
        assert _actions(tmp_path, "model:") == ["retry", "accept"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"retry_on": ("ValueError",)}, "retry_on[0]"), ({"classify": ErrorClass.TRANSIENT}, "classify")],
)
def test_bad_rules_are_named_at_construction(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        RetryController(**kwargs)
    assert info.value.field == field
