"""Running a graph over many tasks: ``retryctl batch``'s engine.

:func:`load_tasks` reads a JSONL task file; :class:`ResultsFile` appends one line per finished task
(and cuts a torn last line after a crash); :func:`run_batch` runs the graph with bounded concurrency,
per-task infrastructure retries and the :class:`BatchBreaker`; :func:`summarise_results` totals a
results file. With ``executor=`` (:class:`RayExecutor` for a Ray cluster, ``retryctl[ray]``) the tasks
run on workers that each build a :class:`GraphJob` once, and this process stays the single writer
(:mod:`retryctl.batch._executor`).
"""

from typing import TYPE_CHECKING

from retryctl.batch._executor import Done, Executor, InProcessExecutor, Job
from retryctl.batch._files import ResultsFile, ResultsState, Task, TaskFormatError, load_tasks, read_results
from retryctl.batch._jobs import GraphJob
from retryctl.batch._loader import DEFAULT_GRAPH, Invocable, load_graph
from retryctl.batch._outcome import (
    BatchBreaker,
    at_max_budget,
    summarise_results,
)
from retryctl.batch._runner import BatchConfig, BatchOutcome, run_batch

if TYPE_CHECKING:
    from retryctl.batch._ray import RayExecutor

__all__ = [
    "DEFAULT_GRAPH",
    "BatchBreaker",
    "BatchConfig",
    "BatchOutcome",
    "Done",
    "Executor",
    "GraphJob",
    "InProcessExecutor",
    "Invocable",
    "Job",
    "RayExecutor",
    "ResultsFile",
    "ResultsState",
    "Task",
    "TaskFormatError",
    "at_max_budget",
    "load_graph",
    "load_tasks",
    "read_results",
    "run_batch",
    "summarise_results",
]


def __getattr__(name: str) -> object:
    # RayExecutor needs the optional ray package ([ray]): imported on first use, so that
    # `import retryctl.batch` never imports ray.
    if name == "RayExecutor":
        from retryctl.batch._ray import RayExecutor

        return RayExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
