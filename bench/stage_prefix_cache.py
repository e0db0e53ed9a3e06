"""Prompt tokens re-evaluated per stage: a two-stage sample (think, then answer) beside a one-stage one,
on the embedded model in-process and through ``python -m llama_cpp.server`` on 127.0.0.1.

In-process, a stage's evaluated tokens are counted by ``Llama.generate``'s own prefix rule
(:func:`retryctl.models._embedded_stages.evaluated_tokens`). Through the server, ``usage.prompt_tokens``
is the whole prompt (llama.cpp reports no cached count), so the figure is read from the server's log:
``Llama.generate: N prefix-match hit, remaining M prompt tokens to eval`` gives M; a request without that
line evaluated its whole prompt. ``--server-cache`` starts the server with ``--cache True`` (its RAM
cache of states, which matters when requests of several samples interleave: ``--k 2``).

    .venv/bin/python bench/stage_prefix_cache.py [--questions 2] [--k 1] [--server-cache] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from retryctl.models import EmbeddedBackend, OpenAIBackend, SamplingParams, Stage, find_smollm2_gguf
from retryctl.models._embedded_stages import evaluated_tokens

QUESTIONS = (
    "Tom has 3 bags with 4 apples in each bag. How many apples does he have?",
    "A shelf holds 5 rows of 6 books. How many books are on the shelf?",
    "Sara had 20 stickers and gave away 7. How many are left?",
)
STAGES = (
    Stage(name="think", temperature=0.3, max_tokens=48, start="<think>\n", end=("</think>",)),
    Stage(name="answer", temperature=0.7, max_tokens=16, start="\nAnswer:"),
)
SINGLE = SamplingParams(temperature=0.7, max_tokens=sum(s.max_tokens for s in STAGES))
"""The one-stage request: as many tokens as the two stages together."""
_REMAINING = re.compile(r"prefix-match hit, remaining (\d+) prompt tokens to eval")


def _messages(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def _embedded_rows(backend: EmbeddedBackend, questions: list[str], k: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    llm = backend.llama
    for q, question in enumerate(questions):
        msgs = _messages(question)
        prompt = llm.tokenize(backend.render_prompt(msgs).encode(), add_bos=False, special=True)
        evaluated = evaluated_tokens(llm, prompt)
        started = time.perf_counter()
        [single] = backend.sample_sync(msgs, SINGLE, k=1)
        rows.append(
            {
                "backend": "embedded",
                "question": q,
                "request": "single",
                "stage": "-",
                "prompt_tokens": len(prompt),
                "evaluated": evaluated,
                "generated": single.usage.output_tokens,
                "wall_s": time.perf_counter() - started,
            }
        )
        started = time.perf_counter()
        cands = backend.sample_sync(msgs, SamplingParams(seed=q, stages=STAGES), k=k)
        wall = time.perf_counter() - started
        for i, cand in enumerate(cands):
            for stage in cand.stages:
                rows.append(
                    {
                        "backend": "embedded",
                        "question": q,
                        "request": f"staged#{i}",
                        "stage": stage.name,
                        "prompt_tokens": None,
                        "evaluated": stage.prompt_tokens,
                        "generated": stage.tokens,
                        "wall_s": wall / len(cands),
                    }
                )
    return rows


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_server(gguf: Path, log: Path, cache: bool) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "smollm2"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024"]
    if cache:
        cmd += ["--cache", "True"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    deadline = time.monotonic() + 120
    while "Uvicorn running on" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("llama_cpp.server did not start:\n" + log.read_text(errors="replace")[-2000:])
        time.sleep(0.2)
    return proc, f"http://127.0.0.1:{port}/v1"


class _LogTail:
    """The server log's lines since the last read."""

    def __init__(self, path: Path) -> None:
        self.path, self.seen = path, len(path.read_text(errors="replace"))

    def new(self) -> str:
        text = self.path.read_text(errors="replace")
        out, self.seen = text[self.seen :], len(text)
        return out


def _evaluated(log: str, prompt_tokens: list[int]) -> list[int]:
    """Per request in ``log`` (in order), the prompt tokens it evaluated (see the module docstring)."""
    hits = [int(m) for m in _REMAINING.findall(log)]
    return hits if len(hits) == len(prompt_tokens) else [*hits, *prompt_tokens[len(hits) :]]


def _server_rows(url: str, tail: _LogTail, render: Any, questions: list[str], k: int) -> list[dict[str, Any]]:
    backend = OpenAIBackend(
        model="smollm2", base_url=url, timeout_s=300, stage_mode="completions", render_prompt=render
    )
    rows: list[dict[str, Any]] = []
    for q, question in enumerate(questions):
        msgs = _messages(question)
        tail.new()
        started = time.perf_counter()
        [single] = asyncio.run(backend.sample(msgs, SINGLE, k=1))
        wall = time.perf_counter() - started
        [evaluated] = _evaluated(tail.new(), [single.usage.input_tokens])
        rows.append(
            {
                "backend": "llama_cpp.server",
                "question": q,
                "request": "single",
                "stage": "-",
                "prompt_tokens": single.usage.input_tokens,
                "evaluated": evaluated,
                "generated": single.usage.output_tokens,
                "wall_s": wall,
            }
        )
        started = time.perf_counter()
        cands = asyncio.run(backend.sample(msgs, SamplingParams(seed=q, stages=STAGES), k=k))
        wall = time.perf_counter() - started
        log = tail.new()
        stages = [(i, s) for i, c in enumerate(cands) for s in c.stages]
        # Requests reach the log in the order the server took them; with k = 1 that is stage order.
        counts = _evaluated(log, [s.prompt_tokens or 0 for _, s in stages]) if k == 1 else None
        for n, (i, stage) in enumerate(stages):
            rows.append(
                {
                    "backend": "llama_cpp.server",
                    "question": q,
                    "request": f"staged#{i}",
                    "stage": stage.name,
                    "prompt_tokens": stage.prompt_tokens,
                    "evaluated": counts[n] if counts is not None else None,
                    "generated": stage.tokens,
                    "wall_s": wall / len(cands),
                }
            )
        if k > 1:
            rows[-1]["server_log_evaluated"] = [int(m) for m in _REMAINING.findall(log)]
    asyncio.run(backend.aclose())
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--k", type=int, default=1, help="staged samples per request")
    parser.add_argument("--server-cache", action="store_true", help="start the server with --cache True")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    questions = list(QUESTIONS[: args.questions])
    gguf = find_smollm2_gguf()
    embedded = EmbeddedBackend(model_path=gguf, n_ctx=1024)
    rows = _embedded_rows(embedded, questions, args.k)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        proc, url = _start_server(gguf, log, args.server_cache)
        try:
            rows += _server_rows(url, _LogTail(log), embedded.render_prompt, questions, args.k)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    embedded.close()
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    head = f"{'backend':<17}{'q':>2} {'request':<10}{'stage':<8}{'prompt':>7}"
    print(f"{head}{'evaluated':>10}{'generated':>10}{'wall s':>8}")
    for r in rows:
        prompt = "" if r["prompt_tokens"] is None else r["prompt_tokens"]
        evaluated = "?" if r["evaluated"] is None else r["evaluated"]
        print(
            f"{r['backend']:<17}{r['question']:>2} {r['request']:<10}{r['stage']:<8}{prompt!s:>7}"
            f"{evaluated!s:>10}{r['generated']:>10}{r['wall_s']:>8.2f}"
        )
        if "server_log_evaluated" in r:
            print(f"{'':<20}server log, prompt tokens evaluated per request: {r['server_log_evaluated']}")


if __name__ == "__main__":
    main()
