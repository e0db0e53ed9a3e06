"""HttpUpstream's connection pool under concurrency, against the fixed-latency server of the benchmarks
(bench/_latency_server.py, a real HTTP server on 127.0.0.1 in its own process that counts the requests it
has in flight at once): requests overlap up to ``max_connections`` and no further, and a connection a
request held (a plain answer, a stream read in part and closed) is free for the next one. Then the proxy
its requests take from the environment. Runtime: about 3 s.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from retryctl.exceptions import ConfigError
from retryctl.gateway import HttpUpstream
from retryctl.gateway._request import parse_body
from retryctl.gateway._upstream import _environment_proxy
from retryctl.models import RetrySettings

SERVER = Path(__file__).resolve().parents[2] / "bench" / "_latency_server.py"
LATENCY_S = 0.3


class _Server:
    def __init__(self, root: str) -> None:
        self.root = root

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.root}/v1/stats", timeout=5) as reply:
            found: dict[str, Any] = json.loads(reply.read())
        return found

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.root}/v1/stats/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=5):
            pass


@pytest.fixture(scope="module")
def latency_server() -> Iterator[_Server]:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--latency", str(LATENCY_S)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("port "), line
        yield _Server(f"http://127.0.0.1:{int(line.split()[1])}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _upstream(server: _Server, max_connections: int) -> HttpUpstream:
    return HttpUpstream(
        base_url=f"{server.root}/v1",
        model="latency",
        timeout_s=30.0,
        retry=RetrySettings(attempts=1),
        breaker=None,
        max_connections=max_connections,
    )


def _request(*, stream: bool = False) -> tuple[dict[str, Any], Any]:
    body = {"model": "latency", "messages": [{"role": "user", "content": "6 * 7?"}], "stream": stream}
    return parse_body(orjson.dumps(body))


async def _burst(upstream: HttpUpstream, n: int) -> list[int]:
    body, chat = _request()
    done = await asyncio.gather(*(upstream.forward(body, chat) for _ in range(n)))
    return [f.status for f in done]


class TestHttpUpstream:
    def test_requests_overlap_up_to_max_connections(self, latency_server: _Server) -> None:
        async def go() -> None:
            upstream = _upstream(latency_server, max_connections=40)
            try:
                latency_server.reset()
                assert await _burst(upstream, 40) == [200] * 40
                assert latency_server.stats()["max_in_flight"] == 40
                latency_server.reset()
                assert await _burst(upstream, 60) == [200] * 60
                assert latency_server.stats() | {"busy_s": 0} == {
                    "requests": 60,
                    "choices": 60,
                    "max_in_flight": 40,  # the rest waited for a connection: never more than asked for
                    "busy_s": 0,
                }
            finally:
                await upstream.aclose()

        asyncio.run(go())

    def test_a_closed_stream_gives_its_connection_back(self, latency_server: _Server) -> None:
        async def go() -> None:
            upstream = _upstream(latency_server, max_connections=16)
            try:
                body, chat = _request(stream=True)
                streams = await asyncio.gather(*(upstream.forward(body, chat) for _ in range(16)))
                for forwarded in streams:
                    assert forwarded.status == 200 and forwarded.chunks is not None
                    assert forwarded.close is not None
                    first = await anext(forwarded.chunks)
                    assert first.startswith(b"{")  # part of the answer read; the rest is left unread
                    await forwarded.close()
                latency_server.reset()
                # Every connection is free again: the next 16 go at once, none waits for a held one.
                assert await _burst(upstream, 16) == [200] * 16
                assert latency_server.stats()["max_in_flight"] == 16
            finally:
                await upstream.aclose()

        asyncio.run(go())


class TestEnvironmentProxy:
    """The proxy the upstream's requests use, read from the environment as httpx's clients read it."""

    URL = "http://10.1.2.3:8000/v1/chat/completions"

    @pytest.fixture(autouse=True)
    def _no_proxies(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)
            monkeypatch.delenv(name.lower(), raising=False)

    def test_none_without_proxy_variables(self) -> None:
        assert _environment_proxy(self.URL) is None

    def test_the_schemes_proxy_then_all_proxy(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("ALL_PROXY", "http://all.proxy:8080")
        assert _environment_proxy(self.URL) == "http://all.proxy:8080"
        monkeypatch.setenv("HTTP_PROXY", "proxy.local:3128")  # no scheme: http://, as httpx reads it
        assert _environment_proxy(self.URL) == "http://proxy.local:3128"
        assert _environment_proxy("https://api.example/v1") == "http://all.proxy:8080"

    def test_no_proxy_excludes_the_host(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HTTP_PROXY", "http://proxy.local:3128")
        monkeypatch.setenv("NO_PROXY", "localhost,10.1.2.3")
        assert _environment_proxy(self.URL) is None
        assert _environment_proxy("http://10.9.9.9/v1") == "http://proxy.local:3128"

    def test_a_proxy_it_cannot_use_is_refused_naming_it(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("ALL_PROXY", "socks5://proxy.local:1080")
        with pytest.raises(ConfigError, match=r"proxy.*socks5://proxy.local:1080.*http:// and https://"):
            HttpUpstream(
                base_url="http://10.1.2.3:8000/v1",
                model="m",
                timeout_s=1.0,
                retry=RetrySettings(attempts=1),
                breaker=None,
                max_connections=4,
            )
