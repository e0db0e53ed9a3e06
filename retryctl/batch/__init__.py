"""Running a graph over many tasks: ``retryctl batch``'s engine.

:func:`load_tasks` reads a JSONL task file; :class:`ResultsFile` appends one line per finished task
(and cuts a torn last line after a crash); :func:`run_batch` runs the graph with bounded concurrency,
per-task infrastructure retries and the :class:`BatchBreaker`; :func:`summarise_results` totals a
results file.
"""

from retryctl.batch._files import ResultsFile, ResultsState, Task, TaskFormatError, load_tasks, read_results
from retryctl.batch._loader import DEFAULT_GRAPH, Invocable, load_graph
from retryctl.batch._outcome import (
    BatchBreaker,
    at_max_budget,
    summarise_results,
)
from retryctl.batch._runner import BatchConfig, BatchOutcome, run_batch

__all__ = [
    "DEFAULT_GRAPH",
    "BatchBreaker",
    "BatchConfig",
    "BatchOutcome",
    "Invocable",
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
