"""A batch's graph as a job for workers (:class:`GraphJob`), and the batch driven through an executor.

:class:`GraphJob` names the graph instead of holding it (``module:attr`` and the factory's options),
so that it pickles to a cluster and each worker builds its own graph once, with a captured decision
log; a task then runs exactly as in :func:`~retryctl.batch.run_batch` in one process (the same config,
``run_id`` and ``thread_id``, infrastructure retries and error lines). :func:`run_on_executor` is that
batch driven by :func:`~retryctl.batch._executor.drive`: records appended to the driver's log, the line
to the results file, the batch breaker over all outcomes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from retryctl._turn import Turn
from retryctl.batch._executor import Done, Executor, drive
from retryctl.batch._files import ResultsFile, Task
from retryctl.batch._loader import _resolve, load_graph
from retryctl.batch._outcome import BatchBreaker, error_line
from retryctl.batch._task import BatchConfig, BatchOutcome, invoker, run_task

if TYPE_CHECKING:
    from retryctl.audit import DecisionLog
    from retryctl.audit._capture import CapturedLog

__all__ = ["GraphJob", "run_on_executor"]


@dataclass
class _Built:
    """What a worker built of a :class:`GraphJob`: the graph's invoke, and the turn its tasks share."""

    invoke: Any
    turn: Turn | None = None


@dataclass(frozen=True, kw_only=True)
class GraphJob:
    """A graph by name, built once per worker: what :func:`~retryctl.batch.run_batch` runs on an executor."""

    spec: str
    """``module:attr`` of a compiled graph or a factory (as ``retryctl batch --graph``)."""
    factory_kwargs: dict[str, Any] = field(default_factory=dict)
    """Options for the factory (``base_url``, ``model_name``, ``policy``...; picklable); ``log`` is the
    worker's captured log, given when :attr:`logs` is set."""
    config: BatchConfig | None = None
    """Retries per task (``None``: the defaults); set by :func:`run_on_executor` from the batch's config."""
    logs: bool = False
    """Whether the factory takes ``log=`` (the worker then passes a captured log, the driver appends)."""

    def build(self, log: CapturedLog | None) -> _Built:
        """The graph's invoke, with ``durability="sync"`` where it checkpoints."""
        kwargs = dict(self.factory_kwargs)
        if log is not None:
            kwargs["log"] = log
        return _Built(invoke=invoker(load_graph(self.spec, **kwargs)))

    async def run(self, built: _Built, task: Task) -> dict[str, Any]:
        """One task, as in one process: retries on infrastructure failure, then its line. The worker's
        tasks share its event loop through one :class:`~retryctl._turn.Turn`, as a batch's tasks do in
        one process (``config.turn``; the reason is :mod:`retryctl._turn`'s)."""
        config = self.config or BatchConfig()
        if not config.turn:
            return await run_task(built.invoke, task, config, asyncio.sleep, time.monotonic)
        if built.turn is None:  # made on the worker's running loop, at its first task
            built.turn = Turn()
        async with built.turn.hold():
            return await run_task(built.invoke, task, config, asyncio.sleep, time.monotonic)

    def failed(self, task: Task, exc: BaseException) -> dict[str, Any]:
        """An error line: the worker kept dying (``--resume`` runs the task again)."""
        return error_line(task, exc, tries=1, elapsed_s=0.0)


async def run_on_executor(
    job: GraphJob,
    tasks: Sequence[Task],
    results: ResultsFile,
    *,
    executor: Executor,
    config: BatchConfig,
    log: DecisionLog | None = None,
    on_done: Callable[[dict[str, Any]], None] | None = None,
) -> BatchOutcome:
    """The batch on ``executor``: each finished task's records appended to ``log``, then its line to
    ``results`` (with ``config.line_fields`` and the ``node`` it ran on), once per task id."""
    from dataclasses import replace

    _resolve(job.spec)  # a misspelt --graph is named here, before a cluster starts
    job = replace(job, config=config, logs=log is not None)
    outcome = BatchOutcome()
    breaker = BatchBreaker(config.breaker_k)

    def accept(task: Task, done: Done) -> bool:
        if log is not None:
            for record in done.records:
                log.append_record(record)
        line = dict(done.line)
        line.update((k, v) for k, v in config.line_fields.items() if k not in line)
        if done.node is not None:
            line.setdefault("node", done.node)
        results.append(line)
        outcome.lines.append(line)
        if breaker.record(line) and outcome.paused is None:
            outcome.paused = breaker.explain()
        if on_done is not None:
            on_done(line)
        return outcome.paused is not None

    driven = await drive(executor, job, tasks, accept=accept)
    outcome.not_started = driven.not_started
    return outcome
