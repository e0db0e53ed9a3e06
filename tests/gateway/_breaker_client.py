"""Clients of one gateway in front of the content-judging server (``_content_server.py``), with the
breaker on a clock the test moves: shared by the proxied and the adaptive breaker tests."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from retryctl.controller import Breaker, BreakerConfig, BreakerState
from retryctl.gateway import Gateway, GatewayConfig, create_app
from tests.gateway._content_server import ContentServer

COOLDOWN_S = 30.0


class Clock:
    """The breaker's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Client:
    """Clients of one gateway (built on the content server), every request on one event loop."""

    def __init__(self, server: ContentServer, **settings: Any) -> None:
        self.clock = Clock()
        self.breaker = Breaker(
            BreakerConfig(failure_threshold=settings.pop("breaker_failures", 5), cooldown_s=COOLDOWN_S),
            clock=self.clock,
        )
        config = GatewayConfig(
            upstream=server.url,
            upstream_model="content",
            model_name="m",
            **{"retries": 3, "retry_wait_s": 0.0, **settings},
        )
        self.gateway = Gateway(config, breaker=self.breaker)
        self._runner = asyncio.Runner()

    def post(self, body: dict[str, Any]) -> httpx.Response:
        return self.burst([body])[0]

    def burst(self, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
        """The requests at once, as many clients would send them."""

        async def go() -> list[httpx.Response]:
            app = create_app(self.gateway.config, gateway=self.gateway)
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
                sent = (client.post("/v1/chat/completions", json=body) for body in bodies)
                return list(await asyncio.gather(*sent))

        return self._runner.run(go())

    def state(self) -> BreakerState:
        """The upstream's breaker state now (a call: each reads the store again)."""
        return self.breaker.state("content")

    def close(self) -> None:
        self._runner.run(self.gateway.aclose())
        self._runner.close()
