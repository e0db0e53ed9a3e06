"""Per-token diagnostics of one candidate, as a decision log or a sample bank records them.

For each generated token: its text, its logprob, the entropy of the distribution it was drawn from
and the probability mass of the three most likely tokens there. The entropy is the whole
distribution's where the backend saw it (the embedded model: ``entropy_kind: "full"``), else an
estimate from the top-k alternatives the server returned (``"top5"`` for five): the k tokens' terms
plus the rest of the mass as one more outcome, a lower bound of the true entropy (lumping outcomes
together never raises it). Drift from the question (the seed's third measure) is not computed: no
library the project keeps gives it cheaply per token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from retryctl.models._types import TokenLogprob

__all__ = ["TOP_MASS_OF", "token_stats", "top_mass", "topk_entropy"]

TOP_MASS_OF = 3
"""How many of the most likely tokens the ``token_top3`` mass adds up."""

_DIGITS = 3  # a thousandth of a nat is finer than any colour or threshold reads; halves the bytes


def _distinct(top: Sequence[tuple[str, float]]) -> list[float]:
    """The alternatives' logprobs, most likely first, each token once (a server may list the drawn
    token again after its top k: llama.cpp's does when it is not among them)."""
    seen: dict[str, float] = {}
    for token, lp in top:
        seen[token] = max(lp, seen.get(token, -math.inf))
    return sorted(seen.values(), reverse=True)


def topk_entropy(top: Sequence[tuple[str, float]]) -> float:
    """The entropy (nats) estimated from the ``top`` alternatives' logprobs: their terms plus the
    mass they leave as one outcome. A lower bound of the whole distribution's entropy."""
    probs = [math.exp(lp) for lp in _distinct(top)]
    rest = max(0.0, 1.0 - sum(probs))
    terms = [p * math.log(p) for p in probs if p > 0.0]
    if rest > 0.0:
        terms.append(rest * math.log(rest))
    return max(0.0, -math.fsum(terms))


def top_mass(top: Sequence[tuple[str, float]], n: int = TOP_MASS_OF) -> float:
    """The probability mass of the ``n`` most likely tokens of those given."""
    return min(1.0, math.fsum(math.exp(lp) for lp in _distinct(top)[:n]))


def token_stats(logprobs: Sequence[TokenLogprob], cap: int | None = None) -> dict[str, Any]:
    """The record fields of one candidate's tokens, the first ``cap`` of them (``None``: all).

    ``token_text``, ``token_logprobs`` and ``tokens_total`` always; ``token_entropy`` with its
    ``entropy_kind`` (``"full"`` or ``"top<k>"``) when every kept token has an entropy or alternatives;
    ``token_top3`` when every kept token has alternatives. The names are the sample banks' own.
    """
    kept = logprobs if cap is None else logprobs[:cap]
    out: dict[str, Any] = {
        "token_text": [t.token for t in kept],
        "token_logprobs": [round(t.logprob, _DIGITS) for t in kept],
        "tokens_total": len(logprobs),
    }
    if not kept:
        return out
    with_top = all(t.top for t in kept)
    if all(t.entropy is not None for t in kept):
        out["token_entropy"] = [round(t.entropy or 0.0, _DIGITS) for t in kept]
        out["entropy_kind"] = "full"
    elif with_top:
        out["token_entropy"] = [round(topk_entropy(t.top), _DIGITS) for t in kept]
        out["entropy_kind"] = f"top{min(len(t.top) for t in kept)}"
    if with_top:
        out["token_top3"] = [round(top_mass(t.top), _DIGITS) for t in kept]
    return out
