"""A fixed-latency OpenAI-compatible chat-completions server on 127.0.0.1, for throughput benchmarks.

    .venv/bin/python bench/_latency_server.py [--latency 0.2] [--jitter 0] [--port 0] [--answer 42]

Every ``POST .../chat/completions`` is answered after exactly ``--latency`` seconds of ``asyncio.sleep``
(requests overlap freely: a server that queued them would measure itself, not the client) with as many
choices as the request's ``n``, each ``"The answer is <answer>."`` with confident per-token logprobs, so
a controller accepts on its first round of samples. ``--jitter J`` (off by default) draws each delay
uniformly from ``latency * [1 - J, 1 + J]`` instead, from a seeded generator. ``GET /stats`` returns
``{"requests": N, "choices": C, "max_in_flight": M, "busy_s": S}``, ``C`` the choices answered (the sum
of the requests' ``n``), ``S`` the sum of the delays drawn (``N * latency`` without jitter);
``POST /stats/reset`` zeroes them. On start it prints ``port <N>`` on stdout.

Plain asyncio streams, HTTP/1.1 keep-alive, no framework: the server's own cost per request must be far
below the client's, on a machine where both share two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
from typing import Any


class LatencyServer:
    """Answers chat completions after a fixed delay; counts requests and the most seen at once."""

    def __init__(self, latency_s: float, answer: str = "42", *, jitter: float = 0.0, seed: int = 1) -> None:
        self.latency_s = latency_s
        self.jitter = jitter
        self.answer = answer
        self.requests = 0
        self.choices = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.busy_s = 0.0
        self._rng = random.Random(seed)

    def delay(self) -> float:
        """The next request's delay: the latency, or a uniform draw around it with jitter."""
        if not self.jitter:
            return self.latency_s
        return self.latency_s * (1.0 + self.jitter * self._rng.uniform(-1.0, 1.0))

    def completion(self, n: int) -> bytes:
        tokens = ["The", " answer", " is", f" {self.answer}", "."]
        logprobs = {"content": [{"token": t, "logprob": -0.01, "top_logprobs": []} for t in tokens]}
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": "".join(tokens)},
                "finish_reason": "stop",
                "logprobs": logprobs,
            }
            for i in range(n)
        ]
        usage = {"prompt_tokens": 20, "completion_tokens": 5 * n, "total_tokens": 20 + 5 * n}
        body = {"id": "lat", "object": "chat.completion", "model": "latency", "choices": choices}
        return json.dumps({**body, "usage": usage}).encode()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                raw = await reader.readexactly(length) if length else b""
                status, body = await self.route(method, path, raw)
                writer.write(
                    b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (status, len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass  # the client closed its connection
        except asyncio.CancelledError:
            pass  # the server is shutting down: end quietly instead of printing a traceback
        finally:
            writer.close()

    async def route(self, method: str, path: str, raw: bytes) -> tuple[int, bytes]:
        if path.endswith("/chat/completions") and method == "POST":
            request: dict[str, Any] = json.loads(raw or b"{}")
            delay = self.delay()
            n = int(request.get("n") or 1)
            self.requests += 1
            self.choices += n
            self.busy_s += delay
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await asyncio.sleep(delay)
            finally:
                self.in_flight -= 1
            return 200, self.completion(n)
        if path.endswith("/stats") and method == "GET":
            stats = {
                "requests": self.requests,
                "choices": self.choices,
                "max_in_flight": self.max_in_flight,
                "busy_s": self.busy_s,
            }
            return 200, json.dumps(stats).encode()
        if path.endswith("/stats/reset") and method == "POST":
            self.requests = self.choices = self.max_in_flight = 0
            self.busy_s = 0.0
            return 200, b"{}"
        return 404, b'{"error": {"message": "not found"}}'


async def serve(latency_s: float, port: int, answer: str, jitter: float = 0.0) -> None:
    app = LatencyServer(latency_s, answer, jitter=jitter)
    # A deep backlog: 64 clients opening their connections at once must not see refusals.
    server = await asyncio.start_server(app.handle, "127.0.0.1", port, backlog=1024)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per completion")
    parser.add_argument("--jitter", type=float, default=0.0, help="delays uniform in latency*[1-J, 1+J]")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    parser.add_argument("--answer", default="42")
    args = parser.parse_args()
    if not 0.0 <= args.jitter < 1.0:
        parser.error("--jitter must be in [0, 1)")
    asyncio.run(serve(args.latency, args.port, args.answer, args.jitter))
    sys.exit(0)


if __name__ == "__main__":
    main()
