"""How often SmolLM2-135M's samples obey a check, with and without its grammar shaping decoding.

Three checks, each also stated as a grammar (GBNF ``yes``/``no``, a regex for a two-number sum, a JSON
schema with a ``pattern``), sampled ``--k`` times each at ``--temperature`` through the embedded backend
and through ``OpenAIBackend`` against a ``python -m llama_cpp.server`` this script starts on 127.0.0.1
(the same GGUF). Prints, per check and backend, the share of samples that pass the check after
decoding, and how many carry ``Candidate.grammar``. A grammar is a filter: the check runs either way.

    .venv/bin/python bench/grammar_compliance.py [--k 20] [--temperature 1.0] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from retryctl.models import (
    Candidate,
    CapabilityRegistry,
    EmbeddedBackend,
    Grammar,
    MalformedResponse,
    ModelBackend,
    OpenAIBackend,
    SamplingParams,
    find_smollm2_gguf,
    sample_blocking,
)

SUM = r"\d{1,2} [+*-] \d{1,2}"
SCHEMA = {
    "type": "object",
    "properties": {"sum": {"type": "string", "pattern": "^[0-9]+ \\+ [0-9]+$"}},
    "required": ["sum"],
}


def _json_sum(text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and re.fullmatch(r"[0-9]+ \+ [0-9]+", str(value.get("sum"))) is not None


CASES: list[tuple[str, str, Grammar, Callable[[str], bool]]] = [
    (
        "yes/no (GBNF)",
        "Is the sky blue? Answer yes or no.",
        Grammar(name="yes-no", gbnf='root ::= "yes" | "no"'),
        lambda t: t in ("yes", "no"),
    ),
    (
        "sum (regex)",
        "Write a sum of two numbers, like 3 + 4.",
        Grammar(name="sum", regex=SUM),
        lambda t: re.fullmatch(SUM, t) is not None,
    ),
    (
        "sum (JSON schema)",
        'Reply with JSON {"sum": "<a> + <b>"} for two numbers.',
        Grammar(name="sum-json", json_schema=SCHEMA),
        _json_sum,
    ),
]


@contextmanager
def llama_server() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = ["--model", str(find_smollm2_gguf()), "--model_alias", "smollm2", "--n_ctx", "1024"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", *args, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(240):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        else:
            raise RuntimeError("llama_cpp.server did not start")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def measure(backend: ModelBackend, k: int, temperature: float) -> list[dict[str, Any]]:
    rows = []
    for label, prompt, grammar, check in CASES:
        for shaped in (False, True):
            params = SamplingParams(
                grammar=grammar if shaped else None,
                temperature=temperature,
                max_tokens=60,
                seed=1,
                logprobs=False,
            )
            # One sample per call: llama.cpp's server ignores n, and the seeds stay the same for both.
            cands: list[Candidate] = []
            malformed = 0
            for i in range(k):
                try:
                    cands += sample_blocking(backend, [{"role": "user", "content": prompt}], _seed(params, i))
                except MalformedResponse:  # a structured rung's reply held no JSON: a failed sample
                    malformed += 1
            rows.append(
                {
                    "check": label,
                    "backend": backend.name,
                    "grammar": shaped,
                    "pass": sum(check(c.text) for c in cands) / k,
                    "decoded_under": sum(c.grammar is not None for c in cands),
                    "malformed": malformed,
                    "k": k,
                }
            )
    return rows


def _seed(params: SamplingParams, i: int) -> SamplingParams:
    from dataclasses import replace

    return replace(params, seed=1 + i)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = measure(EmbeddedBackend(n_ctx=1024), args.k, args.temperature)
    with llama_server() as url:
        registry = CapabilityRegistry()
        served = OpenAIBackend(model="smollm2", base_url=url, timeout_s=120, capabilities=registry)
        rows += measure(served, args.k, args.temperature)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'check':<18} {'backend':<36} {'grammar':<8} {'pass':>5} {'decoded under':>14} {'no JSON':>8}")
    for r in rows:
        under = f"{r['decoded_under']}/{r['k']}"
        cells = f"{r['grammar']!s:<8} {r['pass']:>5.2f} {under:>14} {r['malformed']:>8}"
        print(f"{r['check']:<18} {r['backend']:<36} {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
