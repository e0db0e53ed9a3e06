"""Shared builders for the decision-log tests, and an independent re-implementation of the hash rule."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from retryctl.controller import Action, Evidence, Verdict

GENESIS = "0" * 64


def independent_hash(record: dict[str, Any]) -> str:
    """The documented rule, written from the spec rather than taken from the package."""
    body = {k: v for k, v in record.items() if k != "hash"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_verdict(**overrides: Any) -> Verdict:
    evidence = Evidence(
        signals={"agreement": 0.8, "token_confidence": 0.7},
        weights={"agreement": 0.6, "token_confidence": 0.4},
        thresholds={"confidence": 0.9},
        budget_used={"samples": 5, "usd": 0.002},
        budget_limit={"samples": 8, "usd": None},
        budget_scope="run",
        budget_charged={"samples": 2, "usd": 0.001},
        breakers={"gpt": "closed", "calc": "half_open"},
        error_class="semantic",
        stopping={"stop": False, "confidence": 0.74, "rule": "ac-beta", "window": (1, 2)},
        notes=["verifier timed out; fused without it"],
    )
    fields: dict[str, Any] = {
        "action": Action.REFINE,
        "reason": "agreement 0.80 below 0.90",
        "confidence": 0.76,
        "answer": "12",
        "evidence": evidence,
    }
    fields.update(overrides)
    return Verdict(**fields)


def read_lines(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        return f.read().splitlines(keepends=True)
