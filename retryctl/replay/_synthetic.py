"""Synthetic banks drawn from known answer distributions, to test policies where the truth is known.

Each question gets a difficulty (from ``mix``) and an answer distribution: the gold answer has share
``p`` (easy 0.9-1.0, medium 0.6-0.9, hard 0.35-0.6) and the rest is split among 1-4 wrong answers,
each kept below ``p`` so the gold is the distribution's mode, as self-consistency assumes. A share
``no_answer`` of samples carries no extractable answer. With ``logprobs``, each sample gets 12 token
logprobs whose geometric mean is drawn from Beta(8, 2) for the gold and Beta(5, 3) for a wrong answer
(confident-but-wrong samples exist, as with real models). Written as JSONL in the bank format, so
loading goes through the real loader.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["DIFFICULTY_SHARES", "write_synthetic_bank"]

DIFFICULTY_SHARES: dict[str, tuple[float, float]] = {
    "easy": (0.9, 1.0),
    "medium": (0.6, 0.9),
    "hard": (0.35, 0.6),
}
"""Range of the gold answer's share for each difficulty."""

_TOKENS = 12
_UNSURE = math.log(0.5)


def _distribution(rng: random.Random, share: float) -> list[float]:
    """Gold first, then wrong answers each strictly below the gold's share."""
    rest = 1.0 - share
    wrong = max(1, math.ceil(rest / share + 1e-9))
    wrong = min(4, max(wrong, rng.randint(1, 4)))
    while True:
        weights = [rng.random() + 0.05 for _ in range(wrong)]
        total = sum(weights)
        parts = [rest * w / total for w in weights]
        if all(p < share for p in parts):
            return [share, *parts]


def _sample(rng: random.Random, probs: list[float], no_answer: float, logprobs: bool) -> dict[str, Any]:
    if rng.random() < no_answer:
        # An unanswered sample spends tokens too: a fixed, middling confidence (drawing one would
        # shift every later draw of the bank's stream).
        return {"text": "I am not sure."} | ({"token_logprobs": [_UNSURE] * _TOKENS} if logprobs else {})
    index = rng.choices(range(len(probs)), weights=probs)[0]
    answer = f"ans{index}"
    sample: dict[str, Any] = {"text": f"... so the answer is {answer}.", "answer": answer}
    if logprobs:
        confidence = rng.betavariate(8, 2) if index == 0 else rng.betavariate(5, 3)
        mean = math.log(max(confidence, 1e-6))
        noise = [rng.gauss(0.0, 0.05) for _ in range(_TOKENS)]
        offset = sum(noise) / _TOKENS
        sample["token_logprobs"] = [min(0.0, mean + e - offset) for e in noise]
    return sample


def write_synthetic_bank(
    path: str | Path,
    *,
    mix: Mapping[str, float],
    questions: int = 300,
    samples: int = 40,
    no_answer: float = 0.02,
    logprobs: bool = False,
    seed: int = 0,
) -> Path:
    """Write a bank of ``questions`` × ``samples`` drawn with ``random.Random(seed)``; returns the path.

    ``mix`` maps difficulty names of :data:`DIFFICULTY_SHARES` to weights. The question id records its
    difficulty (``easy-0007``) so reports can check strata against the truth.
    """
    unknown = set(mix) - set(DIFFICULTY_SHARES)
    if unknown:
        raise ValueError(f"unknown difficulties {sorted(unknown)}; known: {sorted(DIFFICULTY_SHARES)}")
    rng = random.Random(seed)
    names = list(mix)
    out = Path(path)
    with out.open("w", encoding="utf-8") as handle:
        for q in range(questions):
            level = rng.choices(names, weights=[mix[n] for n in names])[0]
            low, high = DIFFICULTY_SHARES[level]
            probs = _distribution(rng, rng.uniform(low, high))
            record = {
                "id": f"{level}-{q:04d}",
                "question": f"synthetic question {q}",
                "gold": "ans0",
                "samples": [_sample(rng, probs, no_answer, logprobs) for _ in range(samples)],
            }
            handle.write(json.dumps(record) + "\n")
    return out
