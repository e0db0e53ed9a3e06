"""Adaptive requests under the same rule as proxied ones: the breaker protects clients from the upstream,
not from each other. They sample through the OpenAI backend (its own transport retries), against the
real content-judging server on 127.0.0.1 (tests/gateway/_content_server.py), which answers a tool-call
conversation with the same 500 every time, as llama.cpp's server does."""

from __future__ import annotations

from typing import Any

from retryctl.controller import BreakerState
from tests.gateway._breaker_client import Client
from tests.gateway._content_server import CRASH_500, ContentServer
from tests.gateway.test_breaker import plain, tool_call


def adaptive(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as an adaptive request (one sample to start, two at most)."""
    return {**body, "adaptive": True, "retryctl": {"max_samples": 2, "answer": "text"}}


def client_of(server: ContentServer, clients: list[Client], **settings: Any) -> Client:
    clients.append(Client(server, **settings))
    return clients[-1]


class TestAdaptiveRequestOwnFailures:
    def test_tool_conversations_cost_one_call_each_and_leave_the_breaker_closed_for_another(
        self, server: ContentServer, clients: list[Client]
    ) -> None:
        client = client_of(server, clients)  # 3 retries, a breaker opening at 5 failures
        answers = [client.post(adaptive(tool_call(str(i)))) for i in range(10)]
        assert [a.status_code for a in answers] == [502] * 10
        error = answers[0].json()["error"]
        assert error["code"] == "upstream_refused_request" and error["type"] == "upstream_error"
        assert "refused this request" in error["message"] and "'messages'" in error["message"]
        # The backend reads the 500's validation errors naming the request's messages: no retry at all.
        assert server.hits == {"tool": 10}
        assert client.state() is BreakerState.CLOSED
        other = client.post(adaptive(plain()))  # another client's
        assert other.status_code == 200 and other.json()["retryctl"]["samples_used"] >= 1

    def test_a_500_repeated_word_for_word_costs_two_calls_and_is_not_counted(
        self, server: ContentServer, clients: list[Client]
    ) -> None:
        client = client_of(server, clients)
        answers = [client.post(adaptive(plain(f"crash-500 #{i}"))) for i in range(10)]
        assert [a.status_code for a in answers] == [502] * 10
        error = answers[0].json()["error"]
        assert error["code"] == "upstream_refused_request"
        assert CRASH_500 in error["message"] and "same on a second try" in error["message"]
        # The backend's retries stop at the second identical 500: 2 calls a request, not 4; and every
        # 3 bodies refused alike, the gateway's one-token check finds the upstream healthy.
        assert server.hits == {"crash": 20, "check": 3}
        assert client.state() is BreakerState.CLOSED
        assert client.post(adaptive(plain())).status_code == 200  # another client's

    def test_a_500_that_differs_each_time_is_retried_and_counted(
        self, server: ContentServer, clients: list[Client]
    ) -> None:
        client = client_of(server, clients, breaker_failures=2)
        server.mode = "flaky"
        first = client.post(adaptive(plain("q0")))
        assert first.status_code == 502 and first.json()["error"]["code"] == "upstream_error"
        # All the backend's 4 tries, for each of the engine's attempts (a transient fault is retried):
        # a fault that comes and goes, counted, so that one request's two failures open the breaker.
        assert server.hits["plain"] >= 8 and server.hits["plain"] % 4 == 0
        assert client.state() is BreakerState.OPEN
        refused = client.post(adaptive(plain("q1")))
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "breaker_open"

    def test_an_upstream_that_fails_every_adaptive_request_alike_still_opens_it(
        self, server: ContentServer, clients: list[Client]
    ) -> None:
        client = client_of(server, clients, breaker_failures=2)
        server.mode = "dead"
        answers = [client.post(adaptive(plain(f"q{i}"))) for i in range(4)]
        assert [a.status_code for a in answers] == [502] * 4
        # Two bodies refused alike look like their own; at the third the check fails too, and from
        # then on the 500s are the upstream's, counted and answered as its fault.
        codes = [a.json()["error"]["code"] for a in answers]
        assert codes == ["upstream_refused_request"] * 2 + ["upstream_error"] * 2
        assert server.hits == {"plain": 8, "check": 1}
        assert client.state() is BreakerState.OPEN
        assert client.post(adaptive(plain())).status_code == 503

    def test_an_adaptive_success_clears_what_the_500s_before_it_said(
        self, server: ContentServer, clients: list[Client]
    ) -> None:
        client = client_of(server, clients, breaker_failures=2)
        for i in range(2):
            assert client.post(adaptive(plain(f"crash-500 #{i}"))).status_code == 502
        assert client.post(adaptive(plain())).status_code == 200
        # Counted afresh from the success: two more bodies refused alike ask for no check yet.
        for i in range(2, 4):
            assert client.post(adaptive(plain(f"crash-500 #{i}"))).status_code == 502
        assert server.hits["check"] == 0
        assert client.state() is BreakerState.CLOSED
