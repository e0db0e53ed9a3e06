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
import numpy.typing as npt

from retryctl.agent._grammars import expression_ladder
from retryctl.agent._prompts import expression_prompt
from retryctl.evals import word_problems
from retryctl.models import EmbeddedBackend, SamplingParams, sample_blocking
from retryctl.models._logprobs import TokenScorer, scored

CONSIDERED = 256
"""How many of the most likely tokens are put to the grammar at each step: applying it to the whole
vocabulary costs milliseconds a token, and an admitted token past the top few hundred carries a
negligible share of the mass (the renormalised figure is at most that share too high)."""

WHOLE: list[list[float]] = []
"""Per decoding run, in order, each token's logprob over the whole vocabulary (what the backend reports)."""
ADMITTED: list[list[float]] = []
"""Per decoding run, in order, each token's logprob over the tokens the grammar admits at that step."""


class AdmittedLogprobs:
    """Logprobs renormalised over the grammar's admitted tokens, step by step along one decoding run.

    ``lib`` is the ``llama_cpp`` module, ``vocab`` the model's vocabulary pointer, ``gbnf``/``root`` the
    grammar as the sampler got it. Call :meth:`logprob_of` for each drawn token, in order; it also
    advances the mirror past that token. :meth:`close` frees the mirror (it is not in any chain).
    """

    def __init__(self, lib: Any, vocab: Any, gbnf: str, root: str) -> None:
        self._lib = lib
        self._sampler = lib.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), root.encode("utf-8"))
        if not self._sampler:
            raise ValueError("llama.cpp refused the grammar for the admitted-token mirror")
        self._data = (lib.llama_token_data * (CONSIDERED + 1))()
        self._view = np.ctypeslib.as_array(self._data)  # fields id, logit, p over the same memory
        self._array = lib.llama_token_data_array(self._data, 0, -1, False)

    def logprob_of(
        self, logits: npt.NDArray[np.float32], token: int, top: int = 0
    ) -> tuple[float, list[tuple[int, float]]]:
        """``token``'s logprob among the admitted tokens, and the ``top`` most likely admitted ones."""
        considered = min(CONSIDERED, logits.shape[0])
        ids = np.argpartition(logits, -considered)[-considered:]
        if token not in ids:
            ids = np.append(ids, token)
        n = len(ids)
        view = self._view[:n]
        view["id"], view["logit"], view["p"] = ids, logits[ids], 0.0
        self._array.size, self._array.selected, self._array.sorted = n, -1, False
        self._lib.llama_sampler_apply(self._sampler, self._array)
        # The grammar sampler marks refused tokens -inf in place (it may also reorder nothing else).
        kept = self._view[: self._array.size]
        pairs = zip(kept["id"], kept["logit"], strict=True)
        admitted = {int(i): float(v) for i, v in pairs if math.isfinite(v)}
        self._lib.llama_sampler_accept(self._sampler, token)
        # The drawn token was admitted by the sampler's own grammar; if the mirror disagrees (it cannot,
        # fed the same tokens), fall back to the token alone rather than report a logprob of -inf.
        admitted.setdefault(token, float(logits[token]))
        peak = max(admitted.values())
        log_norm = peak + math.log(sum(math.exp(v - peak) for v in admitted.values()))
        chosen = admitted[token] - log_norm
        if top <= 0:
            return chosen, []
        best = sorted(admitted.items(), key=lambda kv: kv[1], reverse=True)[:top]
        return chosen, [(i, v - log_norm) for i, v in best]

    def close(self) -> None:
        """Free the mirror sampler; safe to call twice."""
        if self._sampler:
            self._lib.llama_sampler_free(self._sampler)
            self._sampler = None


class _BothWays(TokenScorer):
    """The backend's scorer (whole vocabulary), also scoring each token over the admitted ones.

    The admitted set is found by a second llama.cpp grammar sampler fed the same tokens (llama.cpp has
    no call for "the tokens this grammar admits now", and llama-cpp-python none for logprobs under one).
    """

    def __init__(self, lib: Any, ctx: Any, n_vocab: int, vocab: Any, grammar: Any) -> None:
        super().__init__(lib, ctx, n_vocab)
        self._mirror = AdmittedLogprobs(lib, vocab, grammar._grammar, grammar._root)
        WHOLE.append([])
        ADMITTED.append([])

    def score(self, token: int, top: int = 0) -> tuple[float, list[tuple[int, float]], float | None]:
        logits = self.logits()
        ADMITTED[-1].append(self._mirror.logprob_of(logits, token)[0])
        chosen, alternatives, entropy = scored(logits, token, top)
        WHOLE[-1].append(chosen)
        return chosen, alternatives, entropy

    def close(self) -> None:
        self._mirror.close()


class _Measured(EmbeddedBackend):
    def _scorer(self, ctx: Any, n_vocab: int, grammar: Any) -> TokenScorer:
        assert self._llm is not None
        return _BothWays(self._lib, ctx, n_vocab, self._llm._model.vocab, grammar)


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
    model = _Measured()
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    for problem in word_problems(args.count, seed=1):
        messages = [{"role": "user", "content": problem.question}]
        WHOLE.clear()
        ADMITTED.clear()
        params = SamplingParams(
            temperature=0.7, max_tokens=40, logprobs=True, seed=7, grammar=expression_ladder(messages)[0]
        )
        drawn = sample_blocking(model, expression_prompt(messages), params, k=args.k)
        for cand, whole, admitted in zip(drawn, WHOLE, ADMITTED, strict=True):
            kept = len(cand.logprobs or ())  # a stop string trims the text's last tokens
            if not kept:
                continue
            rows.append(
                {
                    "stratum": problem.stratum,
                    "right": _value(cand.text) == Fraction(problem.gold),
                    "admitted": _signals(admitted[:kept]),
                    "whole": _signals(whole[:kept]),
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
