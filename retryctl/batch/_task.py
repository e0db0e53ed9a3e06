"""What one batch task is: how a batch runs (:class:`BatchConfig`), how it ended (:class:`BatchOutcome`),
and one task's run of the graph with its infrastructure retries (:func:`run_task`), the same in one
process (:mod:`retryctl.batch._runner`) and on a worker (:mod:`retryctl.batch._jobs`).

See :mod:`retryctl.batch._runner` for what a task's ``run_id``, ``thread_id``, tries and checkpoints mean.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage
from tenacity import wait_exponential

from retryctl._turn import yielding
from retryctl.batch._files import Task
from retryctl.batch._loader import Invocable
from retryctl.batch._outcome import error_line, infrastructure_failure, result_line
from retryctl.controller import (
    AttemptEngine,
    Classification,
    ErrorClass,
    Finish,
    Policy,
    Request,
    Sleep,
    ValidatorResult,
)
from retryctl.exceptions import ConfigError
from retryctl.nodes._backoff import WaitRetryAfter

__all__ = ["BatchConfig", "BatchOutcome", "invoker", "run_task"]


@dataclass(frozen=True, kw_only=True)
class BatchConfig:
    """How a batch runs."""

    concurrency: int = 4
    """Tasks running at once."""
    retries: int = 3
    """Tries per task when its infrastructure fails (1 = no retry)."""
    retry_wait_s: float = 1.0
    """Backoff multiplier in seconds (the wait doubles per try, capped at 30 s); 0 retries at once."""
    breaker_k: int | None = 5
    """Pause after this many consecutive tasks ended at their maximum budget; ``None`` never pauses."""
    turn: bool = True
    """Run one task's CPU work at a time, first ready first, between its model calls, tool calls and
    backoffs (:mod:`retryctl._turn`); ``False`` lets the tasks interleave at every ``await``."""
    line_fields: dict[str, Any] = field(default_factory=dict)
    """Fields every result line carries besides its own (``{"calibration": "shipped"}``: what the
    batch's verdicts were made under); a line's own field of the same name wins."""

    def __post_init__(self) -> None:
        # Types first: a string from a config file would otherwise fail as "'<' not supported".
        for name in ("concurrency", "retries", "breaker_k"):
            value = getattr(self, name)
            if (value is not None or name != "breaker_k") and (
                isinstance(value, bool) or not isinstance(value, int)
            ):
                raise ConfigError(field=name, value=value, problem="must be an integer")
        if not isinstance(self.turn, bool):
            raise ConfigError(field="turn", value=self.turn, problem="must be true or false")
        wait = self.retry_wait_s
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not math.isfinite(wait):
            raise ConfigError(field="retry_wait_s", value=wait, problem="must be a finite number of seconds")
        if self.concurrency < 1:
            raise ConfigError(field="concurrency", value=self.concurrency, problem="must be >= 1")
        if self.retries < 1:
            raise ConfigError(field="retries", value=self.retries, problem="must be >= 1")
        if self.retry_wait_s < 0:
            raise ConfigError(field="retry_wait_s", value=self.retry_wait_s, problem="must be >= 0")
        if self.breaker_k is not None and self.breaker_k < 1:
            raise ConfigError(field="breaker_k", value=self.breaker_k, problem="must be >= 1 (or off)")


@dataclass
class BatchOutcome:
    """How a batch run ended."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    """The result lines written by this run, in finishing order."""
    paused: str | None = None
    """Why the batch breaker paused the batch, or ``None``."""
    not_started: list[str] = field(default_factory=list)
    """Ids of tasks left for a later ``--resume``."""
    turn_off: str | None = None
    """Why the batch's turn switched itself off (a task kept it while awaiting something the library
    cannot see, so the tasks interleaved as without it), or ``None``."""


_Invoke = Callable[[Any, Any], Awaitable[Any]]


def invoker(graph: Invocable) -> _Invoke:
    """``graph.ainvoke``; with ``durability="sync"`` for a compiled graph that has a checkpointer."""
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.pregel import Pregel

    if not (isinstance(graph, Pregel) and isinstance(graph.checkpointer, BaseCheckpointSaver)):
        return graph.ainvoke
    pregel = graph

    async def invoke(input: Any, config: Any) -> Any:
        rewound = await _rewound(pregel, config)
        if rewound is not None:
            return await pregel.ainvoke(None, rewound, durability="sync")
        return await pregel.ainvoke(input, config, durability="sync")

    return invoke


async def _rewound(graph: Any, config: Any) -> Any:
    """Where to run a thread again whose last run ended as an infrastructure failure, else ``None``.

    Such a thread has ended, so invoking it again would hand back the same final state. Instead it runs
    again from its latest checkpoint without a ``result`` (before the step that wrote it): that step
    and what follows run again, the steps before it do not.
    """
    latest = await graph.aget_state(config)
    if latest.next or infrastructure_failure(latest.values) is None:
        return None
    async for snapshot in graph.aget_state_history(config):
        values = snapshot.values if isinstance(snapshot.values, dict) else {}
        if not values.get("result") and snapshot.next:
            return {**config, "configurable": {**config["configurable"], **snapshot.config["configurable"]}}
    return None


def _task_config(task: Task) -> dict[str, Any]:
    """The config a task runs with: its id as ``run_id``, ``batch-<id>`` as ``thread_id``, and its
    ``gold`` when it has one (the demo agent writes it into its summary record, for the audit)."""
    configurable = {"thread_id": f"batch-{task.id}", "run_id": task.id}
    if task.gold is not None:
        configurable["gold"] = task.gold
    return {"configurable": configurable}


def _task_engine(config: BatchConfig) -> AttemptEngine:
    """The attempt engine of one task: a run of the graph is the attempt, and a run that failed (an
    exception that escaped the graph, or an infrastructure failure it reported) is tried again after
    tenacity's exponential backoff, ``config.retries`` tries in all; a misuse is not."""
    wait = WaitRetryAfter(wait_exponential(multiplier=config.retry_wait_s, max=30.0), max_wait_s=30.0)
    return AttemptEngine(
        policy=Policy(max_retries=config.retries - 1, weights={"validators": 1.0}, low_confidence=("stop",)),
        backoff=wait.for_retry,
    )


def _task_fault(exc: Exception) -> Classification:
    # A misuse (bad config inside the graph) will not heal by retrying; anything else might, since
    # the steps inside the graph have already decided on their own faults.
    if isinstance(exc, ConfigError):
        return Classification(ErrorClass.TERMINAL, f"{type(exc).__name__}: {exc}")
    return Classification(ErrorClass.TRANSIENT, f"{type(exc).__name__}: {exc}")


_RAN = [ValidatorResult("graph_ran", True)]


async def run_task(
    invoke: _Invoke,
    task: Task,
    config: BatchConfig,
    asleep: Callable[[float], Awaitable[None]],
    clock: Callable[[], float],
) -> dict[str, Any]:
    start = clock()
    engine = _task_engine(config)
    wait = yielding(asleep)
    inputs = {"messages": [HumanMessage(task.question)]}
    run_config = _task_config(task)
    attempt, first = engine.start(["graph"])
    step: Request = first
    tries, result, failure = 0, None, None
    while not isinstance(step, Finish):
        if isinstance(step, Sleep):
            await wait(step.seconds)
        tries += 1
        try:
            result = await invoke(inputs, run_config)
            unreachable = infrastructure_failure(result)
            if unreachable is not None:
                raise unreachable  # tried again like an exception that escaped the graph
        except Exception as exc:
            failure = exc
            verdict = engine.judge(attempt, error=_task_fault(exc))
        else:
            failure = None
            verdict = engine.judge(attempt, validators=_RAN)
        attempt, step = engine.after(attempt, verdict)
    if failure is not None:
        return error_line(task, failure, tries=tries, elapsed_s=clock() - start)
    return result_line(task, result, tries=tries, elapsed_s=clock() - start)
