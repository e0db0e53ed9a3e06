"""``retryctl eval``'s engine: the demo agent and its baselines over graded tasks, in one run.

Both go to files in one directory, a line per finished task, so that a run cut short continues where
it stopped (a task with a line is not run again) and the figures can be recomputed from the files:

* ``agent.jsonl``: the agent's result lines, as ``retryctl batch`` writes them (with ``points``, what
  ``retryctl calibrate`` fits on);
* ``baselines.jsonl``: per task, each baseline's majority answer, its vote share and whether it is right.

The agent and the baselines share one backend, so they draw from the same model with the same settings.

With an ``executor`` (``retryctl eval --ray``) both run on its workers instead, one after the other: each
worker builds the model once per part from ``base_url``/``model_name`` (what the CLI built ``model``
from: :func:`~retryctl.agent.demo_model`), the agent as a :class:`~retryctl.batch.GraphJob` of the demo
agent under ``policy``, the baselines as a :class:`BaselineJob`; this process writes both files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retryctl.agent import build_demo_graph
from retryctl.batch import (
    DEFAULT_GRAPH,
    BatchConfig,
    Executor,
    GraphJob,
    ResultsFile,
    Task,
    read_results,
    run_batch,
)
from retryctl.batch._executor import Done, Reusing, drive
from retryctl.controller import Policy
from retryctl.evals._baselines import baseline_line
from retryctl.models import ModelBackend
from retryctl.tools import default_registry

__all__ = ["AGENT_FILE", "BASELINES_FILE", "BaselineJob", "EvalPlan", "run_eval"]

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


@dataclass(frozen=True, kw_only=True)
class BaselineJob:
    """The baselines of one task on a worker: the model built once from its address (or the embedded one)."""

    samples: int
    """Samples of the bare model's majority vote."""
    tool_samples: int
    """Expressions per tool member."""
    base_url: str | None = None
    """The OpenAI-compatible server (``None``: the embedded model)."""
    model_name: str | None = None
    """The model on that server."""
    logs: bool = False
    """Baselines write no decision log."""

    def build(self, log: Any) -> tuple[ModelBackend, Any]:
        """The model and the tool registry, once per worker."""
        from retryctl.agent._graph import demo_model

        return demo_model(self.base_url, self.model_name), default_registry()

    async def run(self, built: tuple[ModelBackend, Any], task: Task) -> dict[str, Any]:
        """The task's baselines line."""
        model, registry = built
        line = await baseline_line(
            task, model, registry, samples=self.samples, tool_samples=self.tool_samples
        )
        line["status"] = "baseline"
        return line

    def failed(self, task: Task, exc: BaseException) -> dict[str, Any]:
        """Not written: the task has no baselines line, so a rerun draws them."""
        return {"id": task.id, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:500]}


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
    executor: Executor | None = None,
    base_url: str | None = None,
    model_name: str | None = None,
) -> None:
    """Run the agent, then the baselines, on every task without a line yet in ``out_dir``; with an
    ``executor`` on its workers, which build the model from ``base_url``/``model_name``."""
    if executor is not None:
        await _run_on(
            tasks, out_dir, executor, policy=policy, plan=plan, on_done=on_done, model=(base_url, model_name)
        )
        return
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


async def _run_on(
    tasks: Sequence[Task],
    out_dir: Path,
    executor: Executor,
    *,
    policy: Policy,
    plan: EvalPlan,
    on_done: Callable[[str, dict[str, Any]], None] | None,
    model: tuple[str | None, str | None],
) -> None:
    """The agent, then the baselines, on ``executor``'s workers (one cluster for both); this process
    writes the files."""
    try:
        await _parts_on(
            tasks, out_dir, Reusing(executor), policy=policy, plan=plan, on_done=on_done, model=model
        )
    finally:
        await executor.close()


async def _parts_on(
    tasks: Sequence[Task],
    out_dir: Path,
    executor: Executor,
    *,
    policy: Policy,
    plan: EvalPlan,
    on_done: Callable[[str, dict[str, Any]], None] | None,
    model: tuple[str | None, str | None],
) -> None:
    os.makedirs(out_dir, exist_ok=True)
    agent_path, baselines_path = out_dir / AGENT_FILE, out_dir / BASELINES_FILE
    base_url, model_name = model
    pending = [t for t in tasks if t.id not in _finished(agent_path)] if plan.agent else []
    if pending:
        job = GraphJob(
            spec=DEFAULT_GRAPH,
            factory_kwargs={"base_url": base_url, "model_name": model_name, "policy": policy},
        )
        config = BatchConfig(
            breaker_k=None,
            line_fields={} if plan.calibration is None else {"calibration": plan.calibration},
        )
        results = ResultsFile(agent_path)
        try:
            await run_batch(
                job,
                pending,
                results,
                config=config,
                executor=executor,
                on_done=(lambda line: on_done("agent", line)) if on_done else None,
            )
        finally:
            results.close()
    pending = [t for t in tasks if t.id not in _finished(baselines_path)] if plan.baselines else []
    if not pending:
        return
    baselines = BaselineJob(
        samples=plan.samples, tool_samples=plan.tool_samples, base_url=base_url, model_name=model_name
    )
    lines = ResultsFile(baselines_path)

    def accept(_task: Task, done: Done) -> bool:
        if done.line.get("status") == "error":
            return False  # no line: a rerun draws this task's baselines
        lines.append(done.line)
        if on_done:
            on_done("baselines", done.line)
        return False

    try:
        await drive(executor, baselines, pending, accept=accept)
    finally:
        lines.close()
