"""Where a batch's tasks run: the executor seam shared by ``batch``, ``eval`` and ``record``.

Public shape::

    from retryctl.batch import GraphJob, InProcessExecutor, RayExecutor, run_batch

    job = GraphJob(spec="retryctl.agent:build_demo_graph", factory_kwargs={"base_url": URL, "model_name": M})
    executor = RayExecutor(address="local", workers=2, max_in_flight=8)   # or "127.0.0.1:6379", "auto"
    outcome = await run_batch(job, tasks, results, config=BatchConfig(...), executor=executor, log=log)

A :class:`Job` is a picklable recipe: each worker :meth:`~Job.build`\\ s it ONCE (the graph, and with it
the embedded model: one load per worker process) with a :class:`~retryctl.audit._capture.CapturedLog`,
then :meth:`~Job.run`\\ s one task at a time on it (several at once on the worker's event loop). An
:class:`Executor` owns the workers: :class:`InProcessExecutor` in this process (tests, and the shape
without a cluster), :class:`~retryctl.batch._ray.RayExecutor` on a Ray cluster.

The driver (:func:`drive`) stays the single writer. Each finished task comes back as a :class:`Done`:
its result line, the decision-log records it produced, and the node it ran on. The driver writes them in
finishing order (the order results files have always had): the task's records first, then its line, so
a result line in the file means its records are in the log. The task id is the idempotency key: a
second :class:`Done` for an id already written (a worker that died after finishing and was retried,
a resubmission) is dropped, records and all, and counted. At most ``max_in_flight`` tasks are out at
once (backpressure: a cluster of 1,000 CPUs does not get 100,000 tasks queued at once). The batch breaker
(``accept`` returning ``True``) is decided here over every worker's outcomes, in finishing order: once it
trips nothing new is submitted, tasks already out finish and are written.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from retryctl.batch._files import Task

if TYPE_CHECKING:
    from retryctl.audit._capture import CapturedLog

__all__ = ["Done", "DriveOutcome", "Executor", "InProcessExecutor", "Job", "Reusing", "drive"]


@dataclass(frozen=True, kw_only=True)
class Done:
    """What one task came to on a worker."""

    task_id: str
    """The task's id: the idempotency key."""
    line: dict[str, Any]
    """Its result line (or bank line), as the worker made it."""
    records: list[dict[str, Any]] = field(default_factory=list)
    """The decision-log records it produced, in the order written, without chain fields."""
    node: str | None = None
    """Where it ran (a Ray node id's first 8 characters; ``None`` in this process)."""


class Job(Protocol):
    """A picklable recipe of what workers run: built once per worker, run once per task."""

    def build(self, log: CapturedLog | None) -> Any:
        """Build what the tasks share (a graph, a model backend), once per worker."""
        ...

    async def run(self, built: Any, task: Task) -> dict[str, Any]:
        """Run one task on ``built``; its line."""
        ...

    def failed(self, task: Task, exc: BaseException) -> dict[str, Any]:
        """The line of a task whose worker kept failing (``--resume`` runs it again)."""
        ...

    @property
    def logs(self) -> bool:
        """Whether the job writes a decision log (its workers then capture one)."""
        ...


class Executor(Protocol):
    """Runs a :class:`Job`'s tasks somewhere; the driver (:func:`drive`) submits and collects."""

    max_in_flight: int
    """Tasks submitted and not yet collected, at most."""

    async def start(self, job: Job) -> None:
        """Bring the workers up (each builds ``job`` once)."""
        ...

    def submit(self, task: Task) -> None:
        """Start ``task`` on some worker."""
        ...

    async def next_done(self) -> Done:
        """Wait for any submitted task to finish; a task whose worker kept failing comes back as
        :meth:`Job.failed`'s line."""
        ...

    async def close(self) -> None:
        """Stop the workers (and a cluster started for the run)."""
        ...


@dataclass
class DriveOutcome:
    """How a driven run ended."""

    written: int = 0
    """Tasks written (each once)."""
    duplicates: list[str] = field(default_factory=list)
    """Ids whose extra :class:`Done` was dropped (a retried task that had already come back)."""
    not_started: list[str] = field(default_factory=list)
    """Ids left for a later ``--resume`` after ``accept`` asked to stop."""
    nodes: dict[str, int] = field(default_factory=dict)
    """Tasks written per node."""


async def drive(
    executor: Executor,
    job: Job,
    tasks: Sequence[Task],
    *,
    accept: Callable[[Task, Done], bool],
) -> DriveOutcome:
    """Run every task of ``tasks`` on ``executor``, at most ``executor.max_in_flight`` at once.

    ``accept(task, done)`` writes one finished task (records, then line) and returns whether to stop
    submitting (the batch breaker); it is called once per task id, in finishing order.
    """
    outcome = DriveOutcome()
    by_id = {t.id: t for t in tasks}
    written: set[str] = set()
    out = 0
    position = 0
    stop = False
    await executor.start(job)
    try:
        while True:
            while not stop and position < len(tasks) and out < executor.max_in_flight:
                executor.submit(tasks[position])
                position += 1
                out += 1
            if out == 0:
                break
            done = await executor.next_done()
            if done.task_id in written or done.task_id not in by_id:
                outcome.duplicates.append(done.task_id)
                continue  # a late twin: the id was already collected, and its slot freed then
            out -= 1
            written.add(done.task_id)
            outcome.written += 1
            node = done.node or "local"
            outcome.nodes[node] = outcome.nodes.get(node, 0) + 1
            if accept(by_id[done.task_id], done):
                stop = True
        if stop:
            outcome.not_started = [t.id for t in tasks[position:]]
    finally:
        await executor.close()
    return outcome


class InProcessExecutor:
    """Runs a :class:`Job` in this process, on this event loop: one worker, built once.

    The shape of a cluster's workers without one (the job is built, run and captured the same way),
    for tests of the driver and for a job that does not need a cluster.
    """

    def __init__(self, *, max_in_flight: int = 4) -> None:
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            from retryctl.exceptions import ConfigError

            raise ConfigError(field="max_in_flight", value=max_in_flight, problem="must be an integer >= 1")
        self.max_in_flight = max_in_flight
        """Tasks submitted and not yet collected, at most."""
        self.started_at = time.monotonic()
        self._job: Job | None = None
        self._built: Any = None
        self._log: CapturedLog | None = None
        self._running: set[asyncio.Task[Done]] = set()

    async def start(self, job: Job) -> None:
        """Build ``job`` once."""
        from retryctl.audit._capture import CapturedLog

        self._job = job
        self._log = CapturedLog() if job.logs else None
        self._built = job.build(self._log)

    def submit(self, task: Task) -> None:
        """Start ``task`` as an asyncio task."""
        self._running.add(asyncio.ensure_future(self._one(task)))

    async def _one(self, task: Task) -> Done:
        assert self._job is not None, "start() first"
        try:
            line = await self._job.run(self._built, task)
        except Exception as exc:
            line = self._job.failed(task, exc)
        records = self._log.take(task.id) if self._log is not None else []
        return Done(task_id=task.id, line=line, records=records)

    async def next_done(self) -> Done:
        """The first running task to finish."""
        finished, _ = await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
        first = finished.pop()
        self._running.discard(first)
        return first.result()

    async def close(self) -> None:
        """Cancel what is still running."""
        for job in self._running:
            job.cancel()
        self._running.clear()
        if self._log is not None:
            self._log.close()


class Reusing:
    """``executor`` for several jobs in a row (``eval``'s agent, then its baselines): closing it after a
    job only releases the workers (``executor.release()``, where it has one: a cluster started for the
    run stays up); the caller closes ``executor`` itself at the end."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        """The executor shared by the jobs."""

    @property
    def max_in_flight(self) -> int:
        """The shared executor's bound."""
        return self.executor.max_in_flight

    @max_in_flight.setter
    def max_in_flight(self, value: int) -> None:
        self.executor.max_in_flight = value

    async def start(self, job: Job) -> None:
        """Start ``job`` on the shared executor."""
        await self.executor.start(job)

    def submit(self, task: Task) -> None:
        """Submit to the shared executor."""
        self.executor.submit(task)

    async def next_done(self) -> Done:
        """The shared executor's next finished task."""
        return await self.executor.next_done()

    async def close(self) -> None:
        """Release the job's workers, keeping what the next job reuses."""
        release = getattr(self.executor, "release", None)
        await (release() if release is not None else self.executor.close())
