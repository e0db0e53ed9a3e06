"""``retryctl serve`` as an operator runs it: graceful shutdown with a request in progress, replicas that
share their breakers through Redis, and bad settings refused before anything starts."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from tests.gateway._support import chat, latency_upstream, serving
from tests.models._fault_server import FaultServer, cut_connection, status


@pytest.fixture
def slow_upstream() -> Iterator[str]:
    """bench/_latency_server.py answering every completion after 1.5 s; yields its /v1 URL."""
    with latency_upstream(1.5) as url:
        yield url


@contextmanager
def one_in_progress(url: str, model: str) -> Iterator[list[httpx.Response]]:
    """A request to ``url`` running in a thread, in progress at the gateway when the block starts;
    its response is in the list once the block ends."""
    answers: list[httpx.Response] = []
    asking = threading.Thread(
        target=lambda: answers.append(
            httpx.post(url + "/chat/completions", json=chat(model=model), timeout=30)
        )
    )
    asking.start()
    while not httpx.get(url.removesuffix("/v1") + "/health").json()["in_flight"]:
        time.sleep(0.01)
    try:
        yield answers
    finally:
        asking.join(timeout=30)


class TestShutdown:
    def test_sigterm_finishes_the_request_in_progress_then_ends_by_the_signal(
        self, slow_upstream: str
    ) -> None:
        with serving("--upstream", slow_upstream, "--upstream-model", "slow") as (url, proc):
            with one_in_progress(url, "slow") as answers:
                proc.send_signal(signal.SIGTERM)
            # uvicorn re-raises the signal once its requests are done, so the process ends as a
            # SIGTERM'd one (what a supervisor expects), not with a status of its own.
            assert proc.wait(timeout=30) == -signal.SIGTERM
        assert [a.status_code for a in answers] == [200]
        assert "The answer is 42." in answers[0].text


class TestBackpressure:
    def test_the_sdk_gets_a_rate_limit_error_past_max_concurrency(self, slow_upstream: str) -> None:
        import openai

        busy = ("--upstream", slow_upstream, "--upstream-model", "slow", "--max-concurrency", "1")
        with serving(*busy) as (url, _), one_in_progress(url, "slow") as first:
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            with pytest.raises(openai.RateLimitError) as caught:
                client.chat.completions.create(model="slow", messages=chat()["messages"])
        assert caught.value.response.headers["retry-after"] == "1"
        assert caught.value.body["code"] == "gateway_busy"  # type: ignore[index]
        assert [r.status_code for r in first] == [200]  # the request in progress was not disturbed


def _idle_connection(url: str) -> http.client.HTTPConnection:
    """A client connection to the gateway at ``url`` that has had one whole answer and now idles."""
    address = httpx.URL(url)
    conn = http.client.HTTPConnection(address.host, address.port, timeout=10)
    conn.request("GET", "/health")
    answer = conn.getresponse()
    assert answer.status == 200 and answer.read()
    return conn


def _closed_by_server(conn: http.client.HTTPConnection) -> bool:
    assert conn.sock is not None  # still open on this side
    conn.sock.setblocking(False)
    try:
        return conn.sock.recv(1) == b""  # the answer was read whole: only the server's FIN is left
    except BlockingIOError:
        return False  # nothing to read, the connection still open


class TestKeepAlive:
    def test_an_idle_connection_outlives_uvicorns_five_seconds_and_keep_alive_sets_it(
        self, slow_upstream: str
    ) -> None:
        # A load balancer keeps idle connections for 60 s on many; a gateway that closed its end at
        # uvicorn's 5 s would see the balancer reuse a closed connection and answer 502.
        upstream = ("--upstream", slow_upstream, "--upstream-model", "slow")
        with serving(*upstream) as (default, _), serving(*upstream, "--keep-alive", "1") as (short, _):
            kept, cut = _idle_connection(default), _idle_connection(short)
            try:
                time.sleep(5.5)
                assert not _closed_by_server(kept)
                assert _closed_by_server(cut)
            finally:
                kept.close()
                cut.close()


class TestStreams:
    def test_a_stream_the_upstream_cuts_is_cut_for_the_caller_too(self, fault_server: FaultServer) -> None:
        # Part of the answer has gone to the caller: it must see an incomplete response, not one
        # that ends as if the answer were whole.
        fault_server.script.append(cut_connection())
        upstream = ("--upstream", fault_server.url, "--upstream-model", "fault", "--retries", "0")
        with serving(*upstream) as (url, _):
            body = chat(model="fault", stream=True)
            with httpx.stream("POST", url + "/chat/completions", json=body, timeout=30) as answer:
                assert answer.status_code == 200
                with pytest.raises(httpx.RemoteProtocolError, match="incomplete"):
                    answer.read()
            again = httpx.post(url + "/chat/completions", json=chat(model="fault"), timeout=30)
        assert again.status_code == 200  # the gateway serves on


class TestReplicas:
    def test_two_replicas_share_one_breaker_through_redis(
        self, fault_server: FaultServer, redis_url: str
    ) -> None:
        model = f"fault-{uuid.uuid4().hex[:8]}"  # a breaker key of its own in the shared Redis
        args = ("--upstream", fault_server.url, "--upstream-model", model, "--retries", "0")
        shared = ("--breakers", redis_url, "--breaker-failures", "2", "--breaker-cooldown", "60")
        with serving(*args, *shared) as (one, _), serving(*args, *shared) as (two, _):
            fault_server.script.extend([status(500)] * 2)
            failed = [
                httpx.post(one + "/chat/completions", json=chat(model=model), timeout=30) for _ in range(2)
            ]
            assert [r.status_code for r in failed] == [502, 502]
            refused = httpx.post(two + "/chat/completions", json=chat(model=model), timeout=30)
        assert refused.status_code == 503  # the other replica's failures opened it
        assert refused.json()["error"]["code"] == "breaker_open"
        assert len(fault_server.requests) == 2  # the refused request never reached the upstream


class TestBadSettings:
    @pytest.mark.parametrize(
        ("args", "named"),
        [
            ([], "--embedded"),
            (["--upstream", "ftp://x", "--upstream-model", "m"], "--upstream"),
            (["--upstream", "http://127.0.0.1:1/v1"], "--upstream-model"),
            (["--embedded", "--breakers", "etcd://x"], "--breakers"),
            (["--embedded", "--max-concurrency", "0"], "--max-concurrency"),
        ],
    )
    def test_refused_with_one_line_naming_the_option(self, args: list[str], named: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "retryctl.cli", "serve", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2
        assert named in done.stderr
        assert "Traceback" not in done.stderr

    def test_a_proxy_the_gateway_cannot_use_is_refused_before_it_starts(self) -> None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "retryctl.cli",
                "serve",
                "--upstream",
                "http://10.1.2.3:8000/v1",
                "--upstream-model",
                "m",
            ],
            capture_output=True,
            check=False,
            text=True,
            timeout=60,
            env={**os.environ, "ALL_PROXY": "socks5://proxy.local:1080", "NO_PROXY": ""},
        )
        assert done.returncode == 2
        assert (
            done.stderr.strip()
            .splitlines()[-1]
            .startswith("problem: invalid proxy='socks5://proxy.local:1080'")
        )
