"""What one task's graph run came to, as a results line; the batch breaker; the end-of-batch summary.

A graph's final state carries ``result`` (``status``, ``answer``, ``confidence``, ``reason``,
``usage`` by budget limit name). A task *ended at its maximum budget* when a limit in
``result["limits"]`` (or ``budget_max``) was used up, or, for a result without limits, when it did
not end accepted and its reason is the controller's budget wording ("... budget 'samples' is spent
(8 of 8)", or "... budget 'samples' would be exceeded: ..." when the next call's estimate did not fit).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from retryctl._answers import answers_agree
from retryctl._scores import Graded, scores
from retryctl.batch._files import Task
from retryctl.controller import FUSED
from retryctl.exceptions import RuntimeFailure

__all__ = [
    "BatchBreaker",
    "InfrastructureFailure",
    "at_max_budget",
    "decision_points",
    "error_line",
    "graded_outcomes",
    "infrastructure_failure",
    "result_line",
    "summarise_results",
]

_SPENT = re.compile(r"budget '[^']+' (?:is spent|would be exceeded)")
_STATUSES = ("accepted", "answered_by_user", "stopped", "needs_user")


def at_max_budget(result: Mapping[str, Any]) -> bool:
    """Whether a graph's ``result`` ended with a budget limit used up (see the module docstring)."""
    usage = result.get("usage") or {}
    limits = result.get("limits") or result.get("budget_max")
    if isinstance(limits, Mapping) and limits:
        for name, limit in limits.items():
            used = usage.get(name)
            if (
                isinstance(limit, int | float)
                and isinstance(used, int | float)
                and limit > 0
                and used >= limit
            ):
                return True
        return False
    if result.get("status") == "accepted":
        return False
    return bool(_SPENT.search(str(result.get("reason", ""))))


class InfrastructureFailure(RuntimeFailure):
    """A graph ended without any model answering, every call failing on a transient fault: its result
    says nothing about the task, so the task is an infrastructure failure (``--resume`` runs it again)."""


def infrastructure_failure(state: Any) -> InfrastructureFailure | None:
    """Whether a graph's final ``state`` is an infrastructure failure, judged on the step's own data.

    It is when the result did not end answered (``stopped`` or ``needs_user``), no sample was ever
    delivered (``usage["samples"]`` is 0), and every verdict in ``state["verdicts"]`` that met an error
    met a transient one (connection refused, DNS, timeout, 429, 5xx) or a breaker that refused the call
    (``evidence.breakers[target] == "open"``), at least one transient. A model that answered badly
    delivered samples; a request refused as invalid (4xx) is no transient fault. A state without the
    step's ``verdicts`` or ``usage`` is never judged one.
    """
    if not isinstance(state, Mapping):
        return None
    result, verdicts = state.get("result"), state.get("verdicts")
    if not isinstance(result, Mapping) or result.get("status") not in ("stopped", "needs_user"):
        return None
    samples = (result.get("usage") or {}).get("samples")
    if not isinstance(samples, int | float) or samples != 0 or not isinstance(verdicts, list) or not verdicts:
        return None
    transient: list[str] = []
    for record in verdicts:
        verdict = record.get("verdict") if isinstance(record, Mapping) else None
        if not isinstance(record, Mapping) or not isinstance(verdict, Mapping):
            return None
        evidence = verdict.get("evidence")
        if not isinstance(evidence, Mapping):
            return None
        error_class = evidence.get("error_class")
        if error_class == "transient":
            transient.append(str(verdict.get("reason", "")))
        elif error_class is not None and (evidence.get("breakers") or {}).get(record.get("target")) != "open":
            return None  # a fault of the request or the answer: the server was reached
    if not transient:
        return None
    return InfrastructureFailure(
        f"no model answered ({len(transient)} transient faults, no sample drawn: is the server up?); "
        f"the last: {transient[-1]}"
    )


def result_line(task: Task, state: Any, *, tries: int, elapsed_s: float) -> dict[str, Any]:
    """The results line for a graph's final ``state`` (a state without a ``result`` is an error line)."""
    line: dict[str, Any] = {"id": task.id, "tries": tries, "elapsed_s": round(elapsed_s, 4)}
    if task.gold is not None:
        line["gold"] = task.gold
    if task.stratum is not None:
        line["stratum"] = task.stratum
    result = state.get("result") if isinstance(state, Mapping) else None
    if not isinstance(result, Mapping) or result.get("status") not in _STATUSES:
        got = None if not isinstance(result, Mapping) else result.get("status")
        line.update(status="error", error=f"the graph's final state has no valid 'result' (status {got!r})")
        return line
    answer = result.get("answer")
    line.update(
        status=result["status"],
        answer=answer,
        confidence=result.get("confidence"),
        reason=str(result.get("reason", "")),
        usage={k: v for k, v in (result.get("usage") or {}).items() if isinstance(v, int | float)},
        at_max_budget=at_max_budget(result),
    )
    for key in ("text", "served_by"):  # the model's own text explains a wrong accept
        if isinstance(result.get(key), str):
            line[key] = result[key]
    if task.gold is not None:
        line["correct"] = answer is not None and answers_agree(str(answer), task.gold)
        line["points"] = decision_points(state.get("verdicts"), task.gold)
    return line


def decision_points(verdicts: Any, gold: str) -> list[dict[str, Any]]:
    """Every verdict of the run that judged an answer, graded: what ``retryctl calibrate`` fits on.

    ``fused`` is the raw fused confidence (``signals["fused"]`` when a calibration applied, else the
    verdict's confidence), ``target`` the member whose answer it was, ``correct`` whether it was right.
    A verdict on a failed check or an error judged no answer on its confidence and is left out.
    """
    points: list[dict[str, Any]] = []
    for record in verdicts if isinstance(verdicts, list) else []:
        verdict = record.get("verdict") if isinstance(record, Mapping) else None
        if not isinstance(verdict, Mapping):
            continue
        evidence = verdict.get("evidence") or {}
        signals = evidence.get("signals") or {}
        answer, confidence = verdict.get("answer"), verdict.get("confidence")
        if answer is None or confidence is None or evidence.get("error_class") is not None:
            continue
        if signals.get("validators", 1.0) < 1.0:
            continue
        fused = signals.get(FUSED, confidence)
        points.append(
            {
                "target": record.get("target"),
                "action": verdict.get("action"),
                "answer": answer,
                "fused": fused,
                "confidence": confidence,
                "correct": answers_agree(str(answer), gold),
            }
        )
    return points


def error_line(task: Task, exc: BaseException, *, tries: int, elapsed_s: float) -> dict[str, Any]:
    """The results line of a task whose infrastructure kept failing (``--resume`` runs it again)."""
    summary = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    line: dict[str, Any] = {
        "id": task.id,
        "status": "error",
        "error": summary,
        "tries": tries,
        "elapsed_s": round(elapsed_s, 4),
    }
    if task.gold is not None:
        line["gold"] = task.gold
    return line


@dataclass
class BatchBreaker:
    """Trips when ``k`` consecutive finished tasks ended at their maximum budget (``None``: never)."""

    k: int | None
    """How many in a row trip it."""
    streak: list[str] = field(default_factory=list)
    """Ids of the current run of tasks at maximum budget, in finishing order."""

    def __post_init__(self) -> None:
        if self.k is not None and self.k < 1:
            raise ValueError(f"breaker k must be >= 1 or None, got {self.k!r}")

    @property
    def tripped(self) -> bool:
        """Whether the last ``k`` tasks all ended at their maximum budget."""
        return self.k is not None and len(self.streak) >= self.k

    def record(self, line: Mapping[str, Any]) -> bool:
        """Count one finished task's line; return whether the breaker is (now) tripped."""
        if line.get("status") == "error":
            return self.tripped  # an infrastructure failure says nothing about difficulty
        if line.get("at_max_budget"):
            self.streak.append(str(line["id"]))
        else:
            self.streak.clear()
        return self.tripped

    def explain(self) -> str:
        """Why the batch paused, for a person."""
        ids = ", ".join(self.streak[-(self.k or 0) :])
        return (
            f"batch breaker: {len(self.streak)} consecutive tasks ended at their maximum budget ({ids}). "
            "The tasks look harder than the model can settle within its budget, so the batch is paused "
            "rather than burning more compute. Raise the budget or use a stronger model, then run again "
            "with --resume to continue where it stopped."
        )


def graded_outcomes(rows: Iterable[Mapping[str, Any]]) -> list[Graded]:
    """The graded finished rows as :class:`~retryctl.evals.Graded` outcomes: accepted when the status
    is ``accepted``, with the final confidence (0 when there was none)."""
    return [
        Graded(
            confidence=float(r.get("confidence") or 0.0),
            correct=bool(r["correct"]),
            accepted=r.get("status") == "accepted",
            stratum=str(r.get("stratum") or ""),
        )
        for r in rows
        if r.get("status") != "error" and "correct" in r
    ]


def summarise_results(lines: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Totals over result lines: status mix, average samples, cost, and with gold how far ``accept``
    can be trusted, by the names of :data:`retryctl._scores.FIGURES` (``accuracy``: accepted and right
    over graded; ``coverage``; ``accepted_precision``; ``ungated_accuracy``: right over graded, accepted
    or not; ``ece`` of the accepted confidences; ``brier`` and ``auroc`` of confidence for correctness: see
    :mod:`retryctl.evals`).

    A task with several lines (an ``error`` line, then the line of the resumed run that finished it)
    counts once, by its last line.
    """
    rows = list({str(r.get("id")): r for r in lines}.values())
    done = [r for r in rows if r.get("status") != "error"]
    graded = graded_outcomes(done)
    samples = [float(r.get("usage", {}).get("samples", 0.0)) for r in done]
    usd = sum(float(r.get("usage", {}).get("usd", 0.0)) for r in done)
    figures = scores(graded).summary() if graded else {}
    return {
        "tasks": len(rows),
        "finished": len(done),
        "errors": len(rows) - len(done),
        "statuses": dict(Counter(str(r.get("status")) for r in rows).most_common()),
        "at_max_budget": sum(1 for r in done if r.get("at_max_budget")),
        "graded": len(graded),
        "accuracy": figures.get("accuracy"),
        "coverage": figures.get("coverage"),
        "accepted_precision": figures.get("accepted_precision"),
        "ungated_accuracy": figures.get("ungated_accuracy"),
        "ece": figures.get("ece"),
        "brier": figures.get("brier"),
        "auroc": figures.get("auroc"),
        "avg_samples_finishing_try": (sum(samples) / len(samples)) if samples else None,
        "usd": usd,
    }
