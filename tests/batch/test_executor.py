"""The executor seam's driver: one writer, each task id written once, records before lines in finishing
order, the batch breaker over every outcome, bounded tasks in flight; the captured log's records equal
the ones a graph writes to a file itself. No cluster here: a scripted executor and the in-process one."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from retryctl.audit import DecisionLog, read_records, verify_log
from retryctl.audit._capture import CapturedLog
from retryctl.batch import (
    BatchConfig,
    Done,
    GraphJob,
    InProcessExecutor,
    Job,
    ResultsFile,
    Task,
    load_graph,
    read_results,
    run_batch,
)
from retryctl.batch._executor import Reusing, drive
from retryctl.exceptions import ConfigError
from tests.batch import _graphs

GRAPH = "tests.batch._graphs:build"


def _tasks(*questions: str) -> list[Task]:
    return [Task(id=f"t{i}", question=q) for i, q in enumerate(questions)]


class Scripted:
    """An executor that finishes tasks in a given order, can hand one back twice (a worker that died
    after its result left, retried by the cluster), and records how many tasks were out at once."""

    def __init__(self, *, max_in_flight: int, order: Sequence[str] = (), twice: Sequence[str] = ()) -> None:
        self.max_in_flight = max_in_flight
        self.order = list(order)
        self.twice = set(twice)
        self.out: list[Task] = []
        self.peak = 0
        self.submitted: list[str] = []
        self.job: Job | None = None
        self.log: CapturedLog | None = None
        self.built: Any = None
        self.closed = False
        self._twins: list[Done] = []

    async def start(self, job: Job) -> None:
        self.job = job
        self.log = CapturedLog() if job.logs else None
        self.built = job.build(self.log)

    def submit(self, task: Task) -> None:
        self.out.append(task)
        self.submitted.append(task.id)
        self.peak = max(self.peak, len(self.out))

    async def next_done(self) -> Done:
        assert self.job is not None
        if self._twins:
            return self._twins.pop()
        # The first task in `order` that is out, else the oldest one out.
        ids = [t.id for t in self.out]
        chosen = next((i for i in self.order if i in ids), ids[0])
        task = self.out.pop(ids.index(chosen))
        line = await self.job.run(self.built, task)
        records = self.log.take(task.id) if self.log is not None else []
        done = Done(task_id=task.id, line=line, records=records, node="node-a" if len(ids) % 2 else "node-b")
        if task.id in self.twice:
            self._twins.append(done)
        return done

    async def close(self) -> None:
        self.closed = True


def _run(
    tasks: list[Task], tmp_path: Path, executor: Any, *, log: bool = True, **config: Any
) -> tuple[Any, list[dict[str, Any]], Path]:
    results = ResultsFile(tmp_path / "r.jsonl")
    decision_log = DecisionLog(tmp_path / "log.jsonl") if log else None
    try:
        outcome = asyncio.run(
            run_batch(
                GraphJob(spec=GRAPH),
                tasks,
                results,
                config=BatchConfig(retry_wait_s=0, **config),
                executor=executor,
                log=decision_log,
            )
        )
    finally:
        results.close()
        if decision_log is not None:
            decision_log.close()
    return outcome, read_results(tmp_path / "r.jsonl").results, tmp_path / "log.jsonl"


class TestDrive:
    def test_a_task_handed_back_twice_is_written_once_with_its_records_once(self, tmp_path: Path) -> None:
        executor = Scripted(max_in_flight=2, twice=["t1"])
        outcome, lines, log = _run(_tasks("add 1 2", "add 3 4", "add 5 6"), tmp_path, executor)
        assert [line["id"] for line in lines] == ["t0", "t1", "t2"]
        assert [line["id"] for line in outcome.lines] == ["t0", "t1", "t2"]
        assert verify_log(log).ok
        # One accepting verdict per task: t1's twin and its records were dropped.
        assert Counter(getattr(r, "run_id", None) for r in read_records(log)) == {"t0": 1, "t1": 1, "t2": 1}
        assert outcome.lines[1]["id"] == "t1"
        assert executor.closed

    def test_lines_follow_finishing_order_and_each_tasks_records_come_before_its_line(
        self, tmp_path: Path
    ) -> None:
        executor = Scripted(max_in_flight=3, order=["t2", "t0", "t1"])
        _, lines, log = _run(_tasks("add 1 2", "add 3 4", "add 5 6"), tmp_path, executor)
        assert [line["id"] for line in lines] == ["t2", "t0", "t1"]
        runs = [getattr(r, "run_id", None) for r in read_records(log)]
        # Contiguous per task, in the same order as the results: the chain is the driver's.
        assert [r for i, r in enumerate(runs) if i == 0 or runs[i - 1] != r] == ["t2", "t0", "t1"]
        assert {line["node"] for line in lines} <= {"node-a", "node-b"}

    def test_the_breaker_counts_every_workers_outcome_and_stops_submitting(self, tmp_path: Path) -> None:
        executor = Scripted(max_in_flight=2)
        tasks = _tasks("hard 1", "hard 2", "hard 3", "add 1 1", "add 2 2", "add 3 3")
        outcome, lines, _ = _run(tasks, tmp_path, executor, breaker_k=2)
        # t0 and t1 (both at max budget) trip it when t1 comes back; t2 was already out and is written.
        assert [line["id"] for line in lines] == ["t0", "t1", "t2"]
        assert executor.submitted == ["t0", "t1", "t2"]
        assert outcome.not_started == ["t3", "t4", "t5"]
        assert outcome.paused is not None and "(t0, t1" in outcome.paused

    @pytest.mark.parametrize("bound", [1, 3])
    def test_no_more_than_max_in_flight_tasks_are_out(self, tmp_path: Path, bound: int) -> None:
        executor = Scripted(max_in_flight=bound)
        _, lines, _ = _run(_tasks(*(f"add {i} 1" for i in range(7))), tmp_path, executor, log=False)
        assert executor.peak == bound
        assert len(lines) == 7

    def test_an_unknown_id_is_dropped(self, tmp_path: Path) -> None:
        class Stray(Scripted):
            async def next_done(self) -> Done:
                done = await super().next_done()
                if done.task_id == "t0":
                    self._twins.append(Done(task_id="nobody", line={"id": "nobody", "status": "accepted"}))
                return done

        written: list[str] = []

        def accept(task: Task, _done: Done) -> bool:
            written.append(task.id)
            return False

        job, tasks = GraphJob(spec=GRAPH), _tasks("add 1 1", "add 2 2")
        outcome = asyncio.run(drive(Stray(max_in_flight=1), job, tasks, accept=accept))
        assert written == ["t0", "t1"]
        assert outcome.duplicates == ["nobody"]


class TestInProcessExecutor:
    def test_its_log_holds_what_the_graph_writes_to_a_file_itself(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        tasks = _tasks("add 1 2", "hard 1", "flaky 3")

        def fresh() -> None:  # the test graph's answers count up across runs: start both at 0
            monkeypatch.setattr(_graphs, "_counter", itertools.count())
            monkeypatch.setattr(_graphs, "_tries", {})

        fresh()
        # The same batch in one process, the graph writing the log itself...
        direct_log = DecisionLog(tmp_path / "direct.jsonl")
        results = ResultsFile(tmp_path / "direct-r.jsonl")
        try:
            graph = load_graph(GRAPH, log=direct_log)
            asyncio.run(run_batch(graph, tasks, results, config=BatchConfig(retry_wait_s=0, concurrency=1)))
        finally:
            results.close()
            direct_log.close()
        # ...and through the seam, the worker capturing and the driver appending.
        fresh()
        _, lines, log = _run(tasks, tmp_path, InProcessExecutor(max_in_flight=1))
        assert verify_log(log).ok

        def timeless(value: Any) -> Any:  # what differs between two runs: the clock's readings
            if isinstance(value, dict):
                drop = ("ts", "prev_hash", "hash", "latency_ms", "wall_s")
                return {k: timeless(v) for k, v in value.items() if k not in drop}
            return [timeless(v) for v in value] if isinstance(value, list) else value

        def bodies(path: Path) -> list[Any]:
            return [timeless(json.loads(line)) for line in path.read_text().splitlines()]

        assert bodies(log) == bodies(tmp_path / "direct.jsonl")
        assert [line["status"] for line in lines] == ["accepted", "stopped", "stopped"]

    def test_bad_bound_names_the_field(self) -> None:
        with pytest.raises(ConfigError) as caught:
            InProcessExecutor(max_in_flight=0)
        assert caught.value.field == "max_in_flight"


class TestMisuse:
    def test_a_graph_job_needs_an_executor_and_an_executor_a_graph_job(self, tmp_path: Path) -> None:
        results = ResultsFile(tmp_path / "r.jsonl")
        try:
            with pytest.raises(ConfigError) as caught:
                asyncio.run(run_batch(GraphJob(spec=GRAPH), [], results, config=BatchConfig()))
            assert caught.value.field == "executor"
            with pytest.raises(ConfigError):
                graph = load_graph(GRAPH)
                asyncio.run(run_batch(graph, [], results, config=BatchConfig(), executor=InProcessExecutor()))
        finally:
            results.close()

    def test_append_record_takes_verdicts_and_summaries_only(self, tmp_path: Path) -> None:
        with DecisionLog(tmp_path / "l.jsonl") as log, pytest.raises(ConfigError) as caught:
            log.append_record({"kind": "repair", "schema": 1})
        assert caught.value.field == "kind"


class TestReusing:
    def test_jobs_in_a_row_release_the_workers_and_leave_closing_to_the_caller(self, tmp_path: Path) -> None:
        class Releasable(Scripted):
            released = 0

            async def release(self) -> None:
                self.released += 1

        inner = Releasable(max_in_flight=2)
        reused = Reusing(inner)
        written: list[str] = []

        def accept(task: Task, _done: Done) -> bool:
            written.append(task.id)
            return False

        async def two_jobs() -> None:
            for batch in (_tasks("add 1 1"), _tasks("add 2 2", "add 3 3")):
                await drive(reused, GraphJob(spec=GRAPH), batch, accept=accept)

        asyncio.run(two_jobs())
        assert written == ["t0", "t0", "t1"]
        assert (inner.released, inner.closed) == (2, False)
        assert reused.max_in_flight == 2
