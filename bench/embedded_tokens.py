"""Embedded decoding speed: tokens/s with per-token logprobs through EmbeddedBackend vs raw llama-cpp-python.

One run, one process, one ``Llama`` (``logits_all=False``) shared by both paths, the same chat prompt,
seed and sampler settings; the raw path is ``Llama.create_chat_completion`` (no logprobs: it cannot give
them without ``logits_all=True``). Runs alternate so that machine load hits both alike; medians are
reported. For context it also times llama-cpp-python's own logprobs path (``logits_all=True``).
Target: the backend (with logprobs) reaches >= 90 % of raw.

    .venv/bin/python bench/embedded_tokens.py [--tokens 128] [--runs 5] [--threads N] [--json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from typing import Any

from retryctl.models import EmbeddedBackend, SamplingParams, find_smollm2_gguf

MESSAGES = [{"role": "user", "content": "Write a long, detailed story about a dragon who learns to bake."}]
SETTINGS: dict[str, Any] = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}


def raw_run(llm: Any, tokens: int, seed: int, logprobs: bool) -> tuple[float, int, str]:
    started = time.perf_counter()
    out = llm.create_chat_completion(
        MESSAGES,
        max_tokens=tokens,
        seed=seed,
        repeat_penalty=1.0,
        logprobs=logprobs or None,
        top_logprobs=5 if logprobs else None,
        **SETTINGS,
    )
    elapsed = time.perf_counter() - started
    return elapsed, int(out["usage"]["completion_tokens"]), out["choices"][0]["message"]["content"]


def backend_run(backend: EmbeddedBackend, tokens: int, seed: int) -> tuple[float, int, str]:
    params = SamplingParams(max_tokens=tokens, seed=seed, logprobs=True, top_logprobs=5, **SETTINGS)
    started = time.perf_counter()
    [cand] = backend.sample_sync(MESSAGES, params)
    elapsed = time.perf_counter() - started
    assert cand.logprobs is not None and len(cand.logprobs) == cand.usage.output_tokens
    return elapsed, cand.usage.output_tokens, cand.text


def rate(samples: list[tuple[float, int, str]]) -> float:
    return statistics.median(n / t for t, n, _ in samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--json", action="store_true", help="also print one JSON object on the last line")
    args = parser.parse_args()

    llama_cpp: Any = importlib.import_module("llama_cpp")

    path = str(find_smollm2_gguf())
    llm = llama_cpp.Llama(
        model_path=path, n_ctx=1024, n_threads=args.threads, logits_all=False, verbose=False
    )
    backend = EmbeddedBackend(llama=llm)
    # Warm-up: page the weights in and fill the prompt cache for both paths.
    raw_run(llm, 8, args.seed, False)
    backend_run(backend, 8, args.seed)

    raw: list[tuple[float, int, str]] = []
    ours: list[tuple[float, int, str]] = []
    for i in range(args.runs):
        seed = args.seed + i
        raw.append(raw_run(llm, args.tokens, seed, False))
        ours.append(backend_run(backend, args.tokens, seed))

    slow = llama_cpp.Llama(
        model_path=path, n_ctx=1024, n_threads=args.threads, logits_all=True, verbose=False
    )
    raw_run(slow, 8, args.seed, True)
    slow_runs = [raw_run(slow, args.tokens, args.seed + i, True) for i in range(args.runs)]

    same = sum(r[2] == o[2] for r, o in zip(raw, ours, strict=True))
    raw_rate, our_rate, slow_rate = rate(raw), rate(ours), rate(slow_runs)
    print(f"model: {path}")
    print(f"threads: {llm.n_threads}  runs: {args.runs}  max tokens per run: {args.tokens}")
    print(f"identical text raw vs backend (same seed): {same}/{args.runs}")
    print(f"raw llama-cpp-python, no logprobs         : {raw_rate:7.1f} tokens/s (median)")
    print(f"EmbeddedBackend, logprobs + top-5         : {our_rate:7.1f} tokens/s (median)")
    print(f"raw llama-cpp-python, logits_all logprobs : {slow_rate:7.1f} tokens/s (median)")
    ratio = our_rate / raw_rate
    print(f"backend / raw: {ratio:.1%}  (target >= 90%: {'met' if ratio >= 0.9 else 'NOT met'})")
    if args.json:
        figures = {"raw_tps": raw_rate, "backend_tps": our_rate, "logits_all_tps": slow_rate, "ratio": ratio}
        print(json.dumps({**figures, "target_ratio": 0.9, "runs": args.runs, "tokens": args.tokens}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
