"""The upstream's breaker protects clients from the upstream, not from each other: the gateway (in this
process) in front of a real server on 127.0.0.1 that answers by content (tests/gateway/_content_server.py:
a 500 for tool-call conversations, as llama.cpp's server does, a 400 for bad messages, 503s when down).
The breaker runs on an injected clock, so no test sleeps through a cool-down."""

from __future__ import annotations

from typing import Any

import pytest

from retryctl.controller import BreakerState
from tests.gateway._breaker_client import COOLDOWN_S, Client
from tests.gateway._content_server import TOOL_500, ContentServer


@pytest.fixture
def client(server: ContentServer, clients: list[Client]) -> Client:
    clients.append(Client(server))
    return clients[-1]


def plain(text: str = "6 * 7?") -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


def tool_call(result: str = "5") -> dict[str, Any]:
    """A valid tool-call conversation (assistant content null with tool_calls, then the tool's answer)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": "2 + 3?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ],
    }


def refused(status: int = 400) -> dict[str, Any]:
    """A body the gateway accepts and the upstream refuses with ``status``."""
    return {**plain(), "user": f"refuse-{status}"}


def _open(client: Client, server: ContentServer) -> None:
    """Open the breaker with health faults, then bring the upstream back."""
    server.mode = "down"
    client.burst([plain()] * 5)
    assert client.state() is BreakerState.OPEN
    server.mode = "ok"
    server.hits.clear()


class TestRequestOwnFailures:
    def test_ten_tool_conversations_of_one_client_leave_the_breaker_closed_for_another(
        self, client: Client, server: ContentServer
    ) -> None:
        answers = [client.post(tool_call(str(i))) for i in range(10)]
        assert [a.status_code for a in answers] == [502] * 10
        error = answers[0].json()["error"]
        assert error["code"] == "upstream_refused_request" and error["type"] == "upstream_error"
        assert "refused this request" in error["message"] and TOOL_500[:40] in error["message"]
        assert client.state() is BreakerState.CLOSED
        assert client.post(plain()).status_code == 200  # client B
        # Each new body is tried once more to tell its 500 from a passing fault, never the 3 retries;
        # every 3 bodies refused alike, the gateway's own one-token check finds the upstream healthy.
        assert server.hits == {"tool": 20, "check": 3, "plain": 1}

    def test_a_body_that_met_its_500_before_is_not_retried(
        self, client: Client, server: ContentServer
    ) -> None:
        assert client.post(tool_call()).status_code == 502
        assert server.hits["tool"] == 2
        assert [client.post(tool_call()).status_code for _ in range(3)] == [502] * 3
        assert server.hits["tool"] == 5  # one call each: the body is known

    def test_an_upstream_refusal_is_passed_back_uncounted_and_not_retried(
        self, client: Client, server: ContentServer
    ) -> None:
        answers = [client.post(refused()) for _ in range(10)]
        assert {a.status_code for a in answers} == {400}
        assert answers[0].json()["error"]["message"] == "messages: too long for the context"  # as written
        assert server.hits["refuse-400"] == 10
        assert client.state() is BreakerState.CLOSED
        assert client.post(plain()).status_code == 200

    def test_a_body_the_gateway_refuses_never_reaches_the_upstream(
        self, client: Client, server: ContentServer
    ) -> None:
        bad = {"model": "m", "messages": [{"role": "robot", "content": "hi"}]}
        answers = [client.post(bad) for _ in range(10)]
        assert {a.status_code for a in answers} == {400}
        assert answers[0].json()["error"]["param"] == "messages[0].role"
        assert sum(server.hits.values()) == 0
        assert client.state() is BreakerState.CLOSED

    def test_a_refusal_not_in_openai_shape_is_put_in_it_keeping_the_message(
        self, client: Client, server: ContentServer
    ) -> None:
        answer = client.post(refused(422))
        assert answer.status_code == 422
        error = answer.json()["error"]
        assert error["code"] == "upstream_refused"
        assert "Unprocessable: user is not allowed" in error["message"]

    def test_an_upstream_that_fails_every_request_alike_still_opens_it(
        self, server: ContentServer, clients: list[Client]
    ) -> None:
        # The same 500 for every body, the gateway's check included: the upstream's, not the requests'.
        client = Client(server, breaker_failures=2)
        clients.append(client)
        server.mode = "dead"
        answers = [client.post(plain(f"q{i}")) for i in range(4)]
        assert [a.status_code for a in answers] == [502] * 4
        # Two bodies refused alike look like their own; at the third the check fails too, and from
        # then on the 500s are the upstream's, counted and answered as its fault.
        codes = [a.json()["error"]["code"] for a in answers]
        assert codes == ["upstream_refused_request"] * 2 + ["upstream_error"] * 2
        assert client.state() is BreakerState.OPEN
        assert server.hits["check"] == 1
        assert client.post(plain()).status_code == 503


class TestHealthFaults:
    def test_503s_open_it_and_every_client_is_refused_without_a_call(
        self, client: Client, server: ContentServer
    ) -> None:
        server.mode = "down"
        assert [client.post(plain()).status_code for _ in range(5)] == [502] * 5
        assert server.hits["plain"] == 20  # each request tried 4 times: a health fault is retried
        assert client.state() is BreakerState.OPEN
        refused = client.post(tool_call())
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "breaker_open"
        assert server.hits["tool"] == 0

    def test_retry_after_and_the_message_say_seconds_from_now(
        self, client: Client, server: ContentServer
    ) -> None:
        _open(client, server)
        client.clock.now += 12.3
        refused = client.post(plain())
        assert refused.headers["retry-after"] == "18"  # 17.7 s left, rounded up
        message = refused.json()["error"]["message"]
        assert "a probe is allowed in 18 s" in message and "t=" not in message


class TestHalfOpen:
    def test_a_burst_waits_for_the_probe_and_is_served(self, client: Client, server: ContentServer) -> None:
        _open(client, server)
        client.clock.now += COOLDOWN_S
        answers = client.burst([plain()] * 20)
        assert [a.status_code for a in answers] == [200] * 20
        assert client.state() is BreakerState.CLOSED
        assert server.hits["plain"] == 20

    def test_adaptive_requests_in_the_burst_wait_for_the_probe_too(
        self, client: Client, server: ContentServer
    ) -> None:
        _open(client, server)
        client.clock.now += COOLDOWN_S
        adaptive = {**plain(), "adaptive": True, "retryctl": {"max_samples": 2, "answer": "text"}}
        answers = client.burst([adaptive, plain()] * 5)
        assert [a.status_code for a in answers] == [200] * 10
        assert client.state() is BreakerState.CLOSED

    def test_a_burst_on_an_upstream_still_down_sends_it_one_probe(
        self, server: ContentServer, clients: list[Client]
    ) -> None:
        client = Client(server, retries=0)
        clients.append(client)
        _open(client, server)
        server.mode = "down"
        client.clock.now += COOLDOWN_S
        statuses = sorted(a.status_code for a in client.burst([plain()] * 20))
        assert statuses == [502] + [503] * 19  # the probe's own fault, then the new cool-down
        assert server.hits["plain"] == 1
        assert client.state() is BreakerState.OPEN

    def test_a_probe_refused_for_its_content_hands_the_probe_to_the_next_request(
        self, client: Client, server: ContentServer
    ) -> None:
        _open(client, server)
        client.clock.now += COOLDOWN_S
        assert client.post(tool_call()).status_code == 502  # its own failure: it proves nothing
        assert client.state() is BreakerState.HALF_OPEN
        assert client.post(plain()).status_code == 200  # admitted as the probe, not refused
        assert client.state() is BreakerState.CLOSED
