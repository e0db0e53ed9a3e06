"""Embedded streaming through the gateway: when the first piece of an answer arrives, against the whole.

Starts ``retryctl serve --embedded`` on 127.0.0.1, then alternates a streamed request and the same
request unstreamed (same seed, temperature 0, so the same answer) ``--runs`` times, and reports the
medians: seconds to the first content chunk, to the end of the stream, and to the unstreamed answer,
with the chunk count. Before token-by-token streaming the first (and only) chunk came with the end.

    .venv/bin/python bench/gateway_stream.py [--tokens 200] [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

MESSAGES = [{"role": "user", "content": "Write a long, detailed story about a dragon who learns to bake."}]


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _up(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"retryctl serve exited {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit("retryctl serve did not come up in 120 s")


def streamed(url: str, body: dict[str, Any]) -> tuple[float, float, int, int]:
    """Seconds to the first content chunk and to [DONE], content chunks, completion tokens."""
    started = time.perf_counter()
    first = 0.0
    chunks = 0
    tokens = 0
    payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/v1/chat/completions", json=payload, timeout=600) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                tokens = int(event["usage"]["completion_tokens"])
            if event["choices"] and event["choices"][0]["delta"].get("content"):
                chunks += 1
                if chunks == 1:
                    first = time.perf_counter() - started
    return first, time.perf_counter() - started, chunks, tokens


def whole(url: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    httpx.post(url + "/v1/chat/completions", json=body, timeout=600).raise_for_status()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    port = _port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "retryctl.cli", "serve", "--embedded", "--port", str(port)]
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ)
    )
    try:
        _up(url, proc)
        body = {
            "model": "smollm2",
            "messages": MESSAGES,
            "max_tokens": args.tokens,
            "temperature": 0.0,
            "seed": 1,
        }
        whole(url, {**body, "max_tokens": 1})  # load the model before timing
        firsts, ends, wholes, chunks, tokens = [], [], [], 0, 0
        for _ in range(args.runs):
            first, end, chunks, tokens = streamed(url, body)
            firsts.append(first)
            ends.append(end)
            wholes.append(whole(url, body))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    out = {
        "tokens": tokens,
        "content_chunks": chunks,
        "first_chunk_s": round(statistics.median(firsts), 3),
        "stream_end_s": round(statistics.median(ends), 3),
        "unstreamed_s": round(statistics.median(wholes), 3),
        "runs": args.runs,
    }
    if args.json:
        print(json.dumps(out))
        return
    print(
        f"{out['tokens']} tokens in {out['content_chunks']} chunks: first chunk {out['first_chunk_s']} s, "
        f"stream ends {out['stream_end_s']} s, unstreamed answer {out['unstreamed_s']} s "
        f"(medians of {args.runs})"
    )


if __name__ == "__main__":
    main()
