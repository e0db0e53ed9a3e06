"""Running a graph over tasks: bounded concurrency, per-task infrastructure retries, the batch breaker.

Tasks start in file order, at most ``concurrency`` at once: each finishing task starts the next. Each runs
``graph.ainvoke({"messages": [HumanMessage(question)]}, config)`` with the task id as
``configurable.run_id`` and ``batch-<id>`` as ``configurable.thread_id``: both come from the id alone,
so they are the same on every try, in every process and on every ``--resume``. The controller inside
the graph turns model faults into verdicts, so an exception that escapes ``ainvoke`` is an
infrastructure failure (a crashed sandbox, a bug). So is a graph that ended without any model
answering, every call a transient fault (a dead or mistyped server:
:func:`~retryctl.batch._outcome.infrastructure_failure`): its ``stopped`` says nothing about the task.
Either way the task is tried again, up to ``retries`` tries with tenacity's exponential backoff, then
its results line says ``error`` and ``--resume`` will try it again. The tries are the attempt engine's
(:class:`~retryctl.controller.AttemptEngine`, as in every driver): a run of the graph is the attempt.

What "again" does depends on the graph. Without a checkpointer, every try (a retry, or the task's turn
in a resumed batch) starts the graph afresh from the question. With one, the task's thread keeps its
checkpoints, and because the config's ``run_id`` is the one LangGraph stored with the thread's last
checkpoint, LangGraph takes the call as re-entry into that run: it ignores the input and continues
from the last checkpoint. The step that failed or was cut off runs again (except tasks of it whose
writes were already saved); earlier steps do not. A thread that had already ended (its result line
lost in a crash) returns its final state without running anything. A compiled graph with a
checkpointer is invoked with ``durability="sync"``, so each step's checkpoint is on disk before the
next step starts: with LangGraph's default (``"async"``) a crash can lose the checkpoint of a step
whose successor had already acted (a plan whose non-idempotent tool call then ran), and the resumed
task would redo that step (plan again, under new tool-call ids the tool journal cannot recognise).

Every finished task is appended to the results file at once, so a crash loses nothing finished. When
the batch breaker trips, no new task starts; tasks already running finish and are written, and
:class:`BatchOutcome` says why the batch paused.

The tasks share the event loop through a :class:`~retryctl._turn.Turn` (``BatchConfig.turn``): one task
at a time does its CPU work, from one model call, tool call or backoff to the next, in the order they
became ready. Without it, tasks whose answers arrive together advance in lock-step and each sends its
next request only after all of their CPU work is done (see :mod:`retryctl._turn`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from retryctl._turn import Ticket, Turn
from retryctl.batch._files import ResultsFile, Task
from retryctl.batch._jobs import GraphJob, run_on_executor
from retryctl.batch._loader import Invocable
from retryctl.batch._outcome import BatchBreaker
from retryctl.batch._task import BatchConfig, BatchOutcome, invoker, run_task
from retryctl.exceptions import ConfigError
from retryctl.telemetry import Tracing, names
from retryctl.telemetry._provider import check_tracer_provider

if TYPE_CHECKING:
    from retryctl.audit import DecisionLog
    from retryctl.batch._executor import Executor

__all__ = ["BatchConfig", "BatchOutcome", "run_batch"]


async def run_batch(
    graph: Invocable | GraphJob,
    tasks: Sequence[Task],
    results: ResultsFile,
    *,
    config: BatchConfig,
    on_done: Callable[[dict[str, Any]], None] | None = None,
    asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    tracer_provider: Any = None,
    executor: Executor | None = None,
    log: DecisionLog | None = None,
) -> BatchOutcome:
    """Run ``graph`` on every task, appending each result to ``results`` as it finishes.

    ``tracer_provider``: the OpenTelemetry provider of the batch's spans (``None``: the application's
    global one, if set; :mod:`retryctl.telemetry`): one ``retryctl.batch`` span, a ``retryctl.task
    <id>`` child per task, in which the graph's own spans (its steps' attempts, its tool calls) nest.

    ``executor``: run the tasks on its workers instead (a :class:`~retryctl.batch.RayExecutor`, see
    :mod:`retryctl.batch._executor`); ``graph`` is then a :class:`~retryctl.batch.GraphJob` each worker
    builds once, ``log`` the driver's decision log (the workers' records are appended to it), and
    ``config.concurrency`` is not used (the executor's ``max_in_flight`` bounds the tasks out)."""
    if executor is not None or isinstance(graph, GraphJob):
        if executor is None or not isinstance(graph, GraphJob):
            raise ConfigError(
                field="executor",
                value=executor,
                problem="an executor runs a GraphJob (a graph by name), and a GraphJob needs an executor",
            )
        return await run_on_executor(
            graph, tasks, results, executor=executor, config=config, log=log, on_done=on_done
        )
    if log is not None:
        raise ConfigError(field="log", value=log, problem="in one process the graph's factory takes the log")
    tracing = Tracing(check_tracer_provider(tracer_provider))
    with tracing.span(names.SPAN_BATCH, {names.BATCH_TASKS: len(tasks)}):
        return await _run_all(
            graph, tasks, results, config=config, on_done=on_done, asleep=asleep, clock=clock, tracing=tracing
        )


async def _run_all(
    graph: Invocable,
    tasks: Sequence[Task],
    results: ResultsFile,
    *,
    config: BatchConfig,
    on_done: Callable[[dict[str, Any]], None] | None,
    asleep: Callable[[float], Awaitable[None]],
    clock: Callable[[], float],
    tracing: Tracing,
) -> BatchOutcome:
    outcome = BatchOutcome()
    invoke = invoker(graph)
    breaker = BatchBreaker(config.breaker_k)
    turn = Turn() if config.turn else None
    running: set[asyncio.Task[None]] = set()
    started = 0

    def start_next(predecessor: Ticket | None) -> None:
        """Start the next task in file order, unless the breaker paused the batch. A finishing task
        calls this while it holds the turn, so its successor takes the turn straight from it: the
        slot's work (one task's end, the next one's start up to its first request) runs as one."""
        nonlocal started
        if started >= len(tasks):
            return
        if outcome.paused is not None:
            outcome.not_started = [t.id for t in tasks[started:]]
            started = len(tasks)
            return
        task = tasks[started]
        started += 1
        ticket = turn.ticket(after=predecessor) if turn is not None else None
        job = asyncio.create_task(one(task, ticket))
        running.add(job)
        job.add_done_callback(running.discard)

    async def one(task: Task, ticket: Ticket | None) -> None:
        cancelled = False
        async with turn.hold(ticket) if turn is not None else contextlib.nullcontext():
            try:
                # The successor starts in the finally below, outside this span: a sibling, not a child.
                with tracing.span(f"{names.SPAN_TASK} {task.id}", {names.TASK_ID: task.id}):
                    line = await run_task(invoke, task, config, asleep, clock)
                line.update((k, v) for k, v in config.line_fields.items() if k not in line)
                results.append(line)
                outcome.lines.append(line)
                if breaker.record(line) and outcome.paused is None:
                    outcome.paused = breaker.explain()
                if on_done is not None:
                    on_done(line)
            except asyncio.CancelledError:
                cancelled = True
                raise
            finally:
                if not cancelled:  # a failure here still frees the slot for the next task
                    start_next(ticket)

    for _ in range(min(config.concurrency, len(tasks))):
        start_next(None)
    try:
        with _frozen_heap():
            while running:  # tasks started by finishing ones join the next round
                await asyncio.gather(*running)
    except asyncio.CancelledError:
        for job in running:
            job.cancel()
        raise
    if turn is not None:
        outcome.turn_off = turn.off_reason
    return outcome


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """Leave the objects that exist now out of the cyclic collector's passes, until the block ends.

    They are most of the heap (imported modules, LangGraph's and the models' caches), and at
    concurrency 64 the collector's full passes over them took 0.1-0.15 s every second or two, a stall
    for every task of the batch. Garbage among them waits for the first collection after the block.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
