"""``retryctl eval``'s engine: the demo agent and its baselines over graded tasks, in one run.

Both go to files in one directory, a line per finished task, so that a run cut short continues where
it stopped (a task with a line is not run again) and the figures can be recomputed from the files:

* ``agent.jsonl``: the agent's result lines, as ``retryctl batch`` writes them (with ``points``, what
  ``retryctl calibrate`` fits on);
* ``baselines.jsonl``: per task, each baseline's majority answer, its vote share and whether it is right.

The agent and the baselines share one backend, so they draw from the same model with the same settings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retryctl.agent import build_demo_graph
from retryctl.batch import BatchConfig, ResultsFile, Task, read_results, run_batch
from retryctl.controller import Policy
from retryctl.evals._baselines import baseline_line
from retryctl.models import ModelBackend
from retryctl.tools import default_registry

__all__ = ["AGENT_FILE", "BASELINES_FILE", "EvalPlan", "run_eval"]

AGENT_FILE = "agent.jsonl"
BASELINES_FILE = "baselines.jsonl"


@dataclass(frozen=True, kw_only=True)
class EvalPlan:
    """What one evaluation runs."""

    samples: int = 20
    """Samples of the bare model's majority vote (``model@N``)."""
    tool_samples: int = 8
    """Expressions each tool member computes for its own majority (``calculator@K``, ``python@K``)."""
    concurrency: int = 2
    """Agent tasks at once."""
    baselines: bool = True
    """Whether to run the baselines (off: the agent alone)."""
    agent: bool = True
    """Whether to run the agent (off: the baselines alone, e.g. in another process meanwhile)."""
    calibration: str | None = None
    """The label of the calibration the agent's policy applies (``shipped``, ``none``,
    ``uncalibrated`` or a file), written on each of its result lines."""


def _finished(path: Path) -> set[str]:
    if not path.exists():
        return set()
    return {str(r["id"]) for r in read_results(path).results if r.get("status") != "error"}


async def run_eval(
    tasks: Sequence[Task],
    out_dir: Path,
    *,
    model: ModelBackend,
    policy: Policy,
    plan: EvalPlan,
    on_done: Callable[[str, dict[str, Any]], None] | None = None,
) -> None:
    """Run the agent, then the baselines, on every task without a line yet in ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    agent_path, baselines_path = out_dir / AGENT_FILE, out_dir / BASELINES_FILE
    pending = [t for t in tasks if t.id not in _finished(agent_path)] if plan.agent else []
    if pending:
        graph = build_demo_graph(model=model, policy=policy)
        results = ResultsFile(agent_path)
        try:
            await run_batch(
                graph,
                pending,
                results,
                config=BatchConfig(
                    concurrency=plan.concurrency,
                    breaker_k=None,
                    line_fields={} if plan.calibration is None else {"calibration": plan.calibration},
                ),
                on_done=(lambda line: on_done("agent", line)) if on_done else None,
            )
        finally:
            results.close()
    if not plan.baselines:
        return
    registry = default_registry()
    pending = [t for t in tasks if t.id not in _finished(baselines_path)]
    if not pending:
        return
    lines = ResultsFile(baselines_path)
    try:
        for task in pending:
            line = await baseline_line(
                task, model, registry, samples=plan.samples, tool_samples=plan.tool_samples
            )
            line["status"] = "baseline"  # a result line of the file's kind (it has an id and a status)
            lines.append(line)
            if on_done:
                on_done("baselines", line)
    finally:
        lines.close()
