"""Token confidence under a grammar: over the admitted tokens against over the whole vocabulary.

The demo's expression member samples set A's questions (``word_problems(count, seed=1)``, the set the
shipped calibration is fitted on) under its strict rung; each sample's token confidence (the geometric
mean of its token probabilities) and weakest span (the least likely 3-token window) are computed both
ways from the same decoding run, and each is scored by how well it tells a sample whose expression
evaluates to the gold answer from one that does not (AUROC, pooled and per stratum).

    .venv/bin/python bench/grammar_confidence.py [--count 40] [--k 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from fractions import Fraction
from typing import Any

import numpy as np

import retryctl.models._admitted as admitted
from retryctl.agent._grammars import expression_ladder
from retryctl.agent._prompts import expression_prompt
from retryctl.evals import word_problems
from retryctl.models import EmbeddedBackend, SamplingParams, sample_blocking
from retryctl.models._logprobs import logprob_of

WHOLE: list[list[float]] = []
"""Per decoding run, in order, each token's logprob over the whole vocabulary."""


class _Both(admitted.TokenScorer):
    """The backend's own scorer, recording the whole-vocabulary logprob of each token beside it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        WHOLE.append([])

    def score(self, token: int, top: int = 0) -> tuple[float, list[tuple[int, float]]]:
        logits = np.ctypeslib.as_array(self._lib.llama_get_logits_ith(self._ctx, -1), shape=(self._n_vocab,))
        WHOLE[-1].append(logprob_of(logits, token)[0])
        return super().score(token, top)


def _install() -> None:
    admitted.TokenScorer = _Both  # type: ignore[misc,assignment]  # the backend imports it at each decoding run


def _value(text: str) -> Fraction | None:
    try:
        expression = str(json.loads(text)["expression"])
    except (ValueError, KeyError, TypeError):
        return None
    if not set(expression) <= set("0123456789+-*/(). "):
        return None
    try:
        # Only digits, operators and parentheses reach eval (checked above); no names, no builtins.
        return Fraction(eval(expression, {"__builtins__": {}}, {})).limit_denominator(10_000)
    except (ArithmeticError, SyntaxError, TypeError, ValueError):
        return None


def _signals(logprobs: list[float]) -> tuple[float, float]:
    mean = sum(logprobs) / len(logprobs)
    windows = [logprobs[i : i + 3] for i in range(max(1, len(logprobs) - 2))]
    return math.exp(mean), min(math.exp(sum(w) / len(w)) for w in windows)


def _auroc(scored: list[tuple[float, bool]]) -> float | None:
    right = [s for s, ok in scored if ok]
    wrong = [s for s, ok in scored if not ok]
    if not right or not wrong:
        return None
    wins = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
    return wins / (len(right) * len(wrong))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=40, help="set A questions (seed 1)")
    parser.add_argument("--k", type=int, default=5, help="samples per question")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    _install()
    model = EmbeddedBackend()
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    for problem in word_problems(args.count, seed=1):
        messages = [{"role": "user", "content": problem.question}]
        WHOLE.clear()
        params = SamplingParams(
            temperature=0.7, max_tokens=40, logprobs=True, seed=7, grammar=expression_ladder(messages)[0]
        )
        for cand, whole in zip(
            sample_blocking(model, expression_prompt(messages), params, k=args.k), WHOLE, strict=True
        ):
            renormalised = [t.logprob for t in cand.logprobs or ()]
            if not renormalised:
                continue
            rows.append(
                {
                    "stratum": problem.stratum,
                    "right": _value(cand.text) == Fraction(problem.gold),
                    "admitted": _signals(renormalised),
                    "whole": _signals(whole[: len(renormalised)]),
                }
            )
    report: dict[str, Any] = {"samples": len(rows), "right": sum(r["right"] for r in rows), "auroc": {}}
    strata: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        strata["all"].append(row)
        strata[row["stratum"]].append(row)
    for name, group in strata.items():
        report["auroc"][name] = {
            f"{signal}/{way}": _auroc([(r[way][index], r["right"]) for r in group])
            for index, signal in enumerate(("token_confidence", "weakest_span"))
            for way in ("admitted", "whole")
        } | {"samples": len(group), "right": sum(r["right"] for r in group)}
    report["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['samples']} samples, {report['right']} right ({report['seconds']} s)")
    columns = tuple(f"{s}/{w}" for s in ("token_confidence", "weakest_span") for w in ("admitted", "whole"))
    print(f"{'stratum':<12}{'n':>5}{'right':>7}" + "".join(f"{c:>27}" for c in columns))
    for name, row in report["auroc"].items():
        cells = "".join(f"{'-' if row[c] is None else format(row[c], '.3f'):>27}" for c in columns)
        print(f"{name:<12}{row['samples']:>5}{row['right']:>7}{cells}")


if __name__ == "__main__":
    main()
