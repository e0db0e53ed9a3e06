"""Pins the public names of retryctl.batch."""

from __future__ import annotations

import retryctl.batch

BATCH = {
    "DEFAULT_GRAPH", "BatchBreaker", "BatchConfig", "BatchOutcome", "Invocable", "ResultsFile",
    "ResultsState",
    "Task", "TaskFormatError", "at_max_budget", "error_line", "load_graph", "load_tasks", "read_results",
    "result_line", "run_batch", "summarise_results",
}  # fmt: skip


class TestExports:
    def test_batch_exports_are_pinned(self) -> None:
        assert set(retryctl.batch.__all__) == BATCH
        assert all(hasattr(retryctl.batch, name) for name in BATCH)
