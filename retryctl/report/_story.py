"""``--why RUN_ID``: one run's story, verdict by verdict, in the words of the records."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from retryctl.report._load import iter_numbered_records, record_problem

__all__ = ["run_story", "story_lines"]


def run_story(
    paths: Iterable[str | os.PathLike[str]], run_id: str, *, invalid: list[str] | None = None
) -> list[dict[str, Any]]:
    """Every record of ``run_id`` in ``paths``, in file order, reduced to what a story needs.

    A story reads more fields than the audit's typed decoder checks, so each record of the run is
    validated in full; one that fails is left out, and ``path:line: problem`` goes to ``invalid``.
    """
    events: list[dict[str, Any]] = []
    for path in paths:
        problems: list[tuple[int, str]] = []
        for number, rec in iter_numbered_records(path, check=False):
            if rec.get("run_id") != run_id:
                continue
            problem = record_problem(rec)
            if problem is not None:
                problems.append((number, problem))
                continue
            if rec.get("kind") == "verdict":
                budget = rec.get("budget") or {}
                event: dict[str, Any] = {
                    "kind": "verdict",
                    "ts": rec.get("ts"),
                    "step_id": rec.get("step_id"),
                    "attempt": rec.get("attempt"),
                    "target": rec.get("target"),
                    "action": rec.get("action"),
                    "reason": rec.get("reason"),
                    "confidence": rec.get("confidence"),
                    "answer": rec.get("answer"),
                    "switch_to": rec.get("switch_to"),
                    "signals": rec.get("signals") or {},
                    "thresholds": rec.get("thresholds") or {},
                    "used": budget.get("used") or {},
                    "limit": budget.get("limit") or {},
                    "breaker": rec.get("breaker") or {},
                    "error_class": rec.get("error_class"),
                    "notes": rec.get("notes") or [],
                    "latency_ms": rec.get("latency_ms"),
                }
                if budget.get("scope") is not None:  # logs that do not say keep their shape
                    event["scope"] = budget["scope"]
                    event["charged"] = budget.get("charged") or {}
                events.append(event)
            elif rec.get("kind") == "summary":
                events.append(
                    {
                        "kind": "summary",
                        "ts": rec.get("ts"),
                        "step_id": rec.get("step_id"),
                        "final_answer": rec.get("final_answer"),
                        "budget_used": rec.get("budget_used") or {},
                        "budget_max": rec.get("budget_max") or {},
                        "estimated_difficulty": rec.get("estimated_difficulty"),
                        "gold": (rec.get("extra") or {}).get("gold"),
                    }
                )
        if invalid is not None:
            invalid.extend(f"{os.fspath(path)}:{n}: {p}" for n, p in problems)
    return events


def _fmt(value: float) -> str:
    return f"{value:.4g}"


_SHOWN = {"attempts": "calls"}
"""Budget quantities under the name a story gives them: the budget's ``attempts`` counts calls
started (model calls, tool calls, retries), and an attempt of a step (a verdict) may make several."""


def _budget(used: dict[str, Any], limit: dict[str, Any]) -> str:
    parts = []
    for name in ("samples", "attempts", "usd", "output_tokens", "transport_retries"):
        cap = limit.get(name)
        # A backend's transport retries are told only where there were some or a limit is set.
        if name == "transport_retries" and not used.get(name) and cap is None:
            continue
        if name in used:
            shown = _SHOWN.get(name, name)
            parts.append(f"{shown} {_fmt(used[name])}" + ("" if cap is None else f"/{_fmt(cap)}"))
    return ", ".join(parts)


def _attempts(n: int) -> str:
    return f"{n} attempt{'s' if n != 1 else ''}"


def story_lines(events: list[dict[str, Any]]) -> list[str]:
    """The story as plain sentences, one or two lines per record.

    A step's verdicts count their attempts up from 1; where they start again before the step's summary,
    the step was run again (a batch interrupted with Ctrl-C, then resumed: the task runs again under its
    run id). Each such run is a *try*: the story says where one begins, and the summary says how many
    tries the step took and how many attempts each made, so that "ended after 4 attempts" is not read
    after seven verdicts as the whole story."""
    lines: list[str] = []
    tries: dict[Any, list[int]] = {}  # each step's tries so far: the highest attempt each named
    for i, e in enumerate(events, start=1):
        step = e["step_id"]
        if e["kind"] == "verdict" and isinstance(e["attempt"], int):
            made = tries.setdefault(step, [])
            if not made or e["attempt"] <= made[-1]:
                if made:
                    lines.append(
                        f"   step {step}: try {len(made) + 1} begins: the try before it ended after "
                        f"{_attempts(made[-1])} without a summary (interrupted, then run again)"
                    )
                made.append(e["attempt"])
            made[-1] = max(made[-1], e["attempt"])
        if e["kind"] == "summary":
            answer = e["final_answer"]
            used = _budget(e["budget_used"], e["budget_max"])
            made = tries.pop(step, [])
            after = "" if not made else f" after {_attempts(made[-1])}"
            if len(made) > 1:
                earlier = " and ".join(_attempts(n) for n in made[:-1])
                after += f" of its try {len(made)} ({len(made) - 1} earlier, interrupted: {earlier})"
            text = f"{i}. step {step} ended{after} with answer {answer!r}; used {used}"
            if e.get("gold") is not None:
                text += f"; gold {e['gold']!r}"
            lines.append(text)
            continue
        on = f" on {e['target']}" if e["target"] else ""
        conf = "" if e["confidence"] is None else f" at confidence {e['confidence']:.2f}"
        lines.append(
            f"{i}. step {e['step_id']}, attempt {e['attempt']}{on}: "
            f"{str(e['action']).upper()}{conf}: {e['reason']}"
        )
        details = []
        if e["signals"]:
            details.append("signals " + ", ".join(f"{k} {v:.2f}" for k, v in e["signals"].items()))
        if e["answer"] is not None:
            details.append(f"best answer {e['answer']!r}")
        budget = _budget(e["used"], e["limit"])
        if e.get("scope") == "run":
            # The run's totals, shared with its other steps: what this attempt charged is its own.
            if budget:
                details.append(f"run budget {budget}")
            charged = ", ".join(f"{_SHOWN.get(k, k)} {_fmt(v)}" for k, v in e["charged"].items())
            details.append(f"this attempt charged {charged or 'nothing'}")
        elif budget:
            details.append(f"budget {budget}")
        opened = {k: v for k, v in e["breaker"].items() if v != "closed"}
        if opened:
            details.append("breakers " + ", ".join(f"{k} {v}" for k, v in opened.items()))
        if e["error_class"]:
            details.append(f"error class {e['error_class']}")
        details.extend(e["notes"])
        if details:
            lines.append("   " + "; ".join(details))
    return lines
