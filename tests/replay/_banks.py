"""Helpers that write small banks for the bench tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_bank(path: Path, records: list[Any]) -> Path:
    """Write one JSON line per record (a str record is written as it is)."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def question(qid: str, gold: str, answers: Sequence[str | None], **extra: Any) -> dict[str, Any]:
    """A bank record whose samples carry explicit answers (None → only a text without one)."""
    samples = [
        {"text": f"reasoning {i}. The answer is {a}."} if a is not None else {"text": ""}
        for i, a in enumerate(answers)
    ]
    for sample, a in zip(samples, answers, strict=True):
        if a is not None:
            sample["answer"] = a
    return {"id": qid, "question": f"question {qid}?", "gold": gold, "samples": samples, **extra}
