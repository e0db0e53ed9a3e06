"""run_batch with real graphs: concurrency, infrastructure retries, the breaker pausing the batch,
checkpointed graphs (sync durability, a task run again continues its thread); load_graph."""

from __future__ import annotations

import asyncio
import gc
import warnings
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from retryctl.batch import BatchConfig, ResultsFile, Task, load_graph, read_results, run_batch
from retryctl.exceptions import ConfigError
from tests.batch import _graphs


def _tasks(*questions: str) -> list[Task]:
    return [Task(id=f"t{i}", question=q) for i, q in enumerate(questions)]


def _run(graph: Any, tasks: list[Task], path: Path, **config: Any) -> Any:
    results = ResultsFile(path)
    try:
        return asyncio.run(run_batch(graph, tasks, results, config=BatchConfig(retry_wait_s=0, **config)))
    finally:
        results.close()


class Tracking:
    """Wraps a graph and records how many ``ainvoke`` calls were in flight at once."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.now = 0
        self.peak = 0

    async def ainvoke(self, input: Any, config: Any = None) -> Any:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(0)  # yield so that other tasks can start
            return await self.graph.ainvoke(input, config)
        finally:
            self.now -= 1


class FreezeWatcher:
    """A graph that records how many objects the cyclic collector had frozen while it ran."""

    def __init__(self, *, fail: bool = False) -> None:
        self.seen: list[int] = []
        self.fail = fail

    async def ainvoke(self, input: Any, config: Any = None) -> Any:
        self.seen.append(gc.get_freeze_count())
        if self.fail:
            raise asyncio.CancelledError  # the batch is cancelled from inside a task
        return {"answer": "ok"}


class AlwaysDown:
    """A graph whose infrastructure never answers."""

    async def ainvoke(self, input: Any, config: Any = None) -> Any:
        raise ConnectionError("model server refused the connection")


class TestRunBatch:
    @pytest.mark.parametrize("fail", [False, True])
    def test_the_heap_before_the_batch_is_frozen_during_it_and_thawed_after(
        self, tmp_path: Path, fail: bool
    ) -> None:
        graph = FreezeWatcher(fail=fail)
        assert gc.get_freeze_count() == 0
        if fail:
            with pytest.raises(asyncio.CancelledError):
                _run(graph, _tasks("a"), tmp_path / "r.jsonl")
        else:
            _run(graph, _tasks("a", "b"), tmp_path / "r.jsonl")
        assert graph.seen and all(n > 0 for n in graph.seen)
        assert gc.get_freeze_count() == 0

    def test_runs_tasks_concurrently_within_the_bound(self, tmp_path: Path) -> None:
        _graphs._barriers.clear()  # a fresh barrier for this event loop
        graph = Tracking(load_graph("tests.batch._graphs:build"))
        tasks = _tasks("pair a", "pair b", "add 1 2", "add 2 2", "add 3 2")
        outcome = _run(graph, tasks, tmp_path / "r.jsonl", concurrency=2, breaker_k=None)
        # The two "pair" tasks wait for each other: they finish only if both ran at once.
        assert {line["id"]: line["tries"] for line in outcome.lines} == {t.id: 1 for t in tasks}
        assert graph.peak == 2
        answers = {r["id"]: r["answer"] for r in read_results(tmp_path / "r.jsonl").results}
        assert answers["t2"] == "3" and answers["t3"] == "4" and answers["t4"] == "5"

    def test_infrastructure_failure_is_retried_per_task(self, tmp_path: Path) -> None:
        graph = load_graph("tests.batch._graphs:build")
        outcome = _run(graph, _tasks("flaky add 1 1", "add 5 5"), tmp_path / "r.jsonl")
        by_id = {line["id"]: line for line in outcome.lines}
        assert by_id["t0"]["tries"] == 2 and by_id["t0"]["status"] != "error"
        assert by_id["t1"]["tries"] == 1 and by_id["t1"]["answer"] == "10"

    def test_retries_give_up_with_an_error_line_after_backoff(self, tmp_path: Path) -> None:
        waits: list[float] = []

        async def asleep(seconds: float) -> None:
            waits.append(seconds)

        results = ResultsFile(tmp_path / "r.jsonl")
        config = BatchConfig(retries=3, retry_wait_s=1.0)
        outcome = asyncio.run(run_batch(AlwaysDown(), _tasks("q"), results, config=config, asleep=asleep))
        results.close()
        (line,) = outcome.lines
        assert line["status"] == "error" and line["tries"] == 3
        assert "ConnectionError: model server refused the connection" in line["error"]
        assert waits == [1.0, 2.0]

    def test_breaker_pauses_after_k_tasks_at_max_budget(self, tmp_path: Path) -> None:
        graph = load_graph("tests.batch._graphs:build")
        tasks = _tasks("hard 1", "add 1 1", "hard 2", "hard 3", "hard 4", "add 2 2", "add 3 3")
        outcome = _run(graph, tasks, tmp_path / "r.jsonl", concurrency=1, breaker_k=3)
        assert [line["id"] for line in outcome.lines] == ["t0", "t1", "t2", "t3", "t4"]
        assert outcome.not_started == ["t5", "t6"]
        assert outcome.paused is not None and "(t2, t3, t4)" in outcome.paused
        assert all(line["at_max_budget"] for line in outcome.lines if line["id"] != "t1")


def _checkpointed(spec: str, checkpoints: Path, tasks: list[Task], path: Path, **config: Any) -> Any:
    """Run ``spec`` loaded with an AsyncSqliteSaver on ``checkpoints``, as ``--checkpoints`` does."""

    async def run() -> Any:
        async with AsyncSqliteSaver.from_conn_string(str(checkpoints)) as saver:
            graph = load_graph(spec, checkpointer=saver)
            results = ResultsFile(path)
            try:
                return await run_batch(graph, tasks, results, config=BatchConfig(retry_wait_s=0, **config))
            finally:
                results.close()

    return asyncio.run(run())


@pytest.fixture
def counts() -> None:
    _graphs.plans.clear()
    _graphs.acts.clear()


@pytest.mark.usefixtures("counts")
class TestCheckpointedRun:
    def test_each_step_is_stored_before_the_next_one_runs(self, tmp_path: Path) -> None:
        # LangGraph's default durability ("async") would still be writing plan's checkpoint here.
        outcome = _checkpointed(
            "tests.batch._graphs:plan_act", tmp_path / "c.sqlite", _tasks("go 1"), tmp_path / "r.jsonl"
        )
        (line,) = outcome.lines
        assert line["status"] == "accepted" and line["reason"] == "plan stored"

    def test_a_retry_continues_the_thread_instead_of_starting_over(self, tmp_path: Path) -> None:
        outcome = _checkpointed(
            "tests.batch._graphs:plan_act", tmp_path / "c.sqlite", _tasks("fail 2 x"), tmp_path / "r.jsonl"
        )
        (line,) = outcome.lines
        assert line["status"] == "accepted" and line["tries"] == 3
        assert _graphs.plans["fail 2 x"] == 1 and _graphs.acts["fail 2 x"] == 3

    def test_a_task_run_again_in_a_later_batch_continues_its_own_thread(self, tmp_path: Path) -> None:
        tasks = _tasks("fail 1 y", "go 2")  # t0 fails its only try; t1 finishes
        first = _checkpointed(
            "tests.batch._graphs:PLAN_ACT", tmp_path / "c.sqlite", tasks, tmp_path / "a.jsonl", retries=1
        )
        by_id = {line["id"]: line for line in first.lines}
        assert by_id["t0"]["status"] == "error" and by_id["t1"]["status"] == "accepted"
        # A later process, a new saver on the same file, the tasks in another order: t0 continues
        # after its plan (no new plan id), and t1, already ended, returns its state without running.
        again = _checkpointed(
            "tests.batch._graphs:plan_act_builder", tmp_path / "c.sqlite", tasks[::-1], tmp_path / "b.jsonl"
        )
        by_id_again = {line["id"]: line for line in again.lines}
        assert by_id_again["t0"]["status"] == "accepted" and by_id_again["t0"]["tries"] == 1
        assert by_id_again["t1"]["answer"] == by_id["t1"]["answer"]
        assert _graphs.plans == {"fail 1 y": 1, "go 2": 1}
        assert _graphs.acts == {"fail 1 y": 2, "go 2": 1}

    def test_without_a_checkpointer_every_try_starts_over_and_durability_is_not_passed(
        self, tmp_path: Path
    ) -> None:
        graph = load_graph("tests.batch._graphs:plan_act")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # LangGraph warns when durability is given without one
            outcome = _run(graph, _tasks("fail 1 z"), tmp_path / "r.jsonl")
        (line,) = outcome.lines
        assert line["status"] == "accepted" and line["tries"] == 2 and line["reason"] == ""
        assert _graphs.plans["fail 1 z"] == 2


class TestBatchConfig:
    @pytest.mark.parametrize(
        ("field", "value"), [("concurrency", 0), ("retries", 0), ("retry_wait_s", -1.0), ("breaker_k", 0)]
    )
    def test_bad_value_names_the_field(self, field: str, value: float) -> None:
        with pytest.raises(ConfigError, match=field):
            BatchConfig(**{field: value})  # type: ignore[arg-type]


class TestLoadGraph:
    @pytest.mark.parametrize(
        ("spec", "problem"),
        [
            ("nocolon", "module:attr"),
            ("no_such_module_xyz:g", "cannot import"),
            ("tests.batch._graphs:nope", "no attribute"),
            ("tests.batch._graphs:_tries", "no ainvoke"),
        ],
    )
    def test_bad_spec_is_a_config_error(self, spec: str, problem: str) -> None:
        with pytest.raises(ConfigError, match=problem):
            load_graph(spec)

    def test_factory_or_compiled_graph(self) -> None:
        graph = load_graph("tests.batch._graphs:build")
        assert hasattr(graph, "ainvoke")

    @pytest.mark.parametrize(
        "spec",
        [
            "tests.batch._graphs:plan_act",  # a factory taking checkpointer=
            "tests.batch._graphs:plan_act_builder",  # a factory returning an uncompiled graph
            "tests.batch._graphs:PLAN_ACT",  # an uncompiled graph
        ],
    )
    def test_a_checkpointer_goes_to_the_factory_or_to_compile(self, spec: str) -> None:
        saver = InMemorySaver()
        graph = load_graph(spec, checkpointer=saver)
        assert getattr(graph, "checkpointer", None) is saver

    @pytest.mark.parametrize("spec", ["tests.batch._graphs:build", "tests.batch._graphs:PLAN_ACT_COMPILED"])
    def test_a_graph_that_cannot_take_a_checkpointer_is_a_config_error(self, spec: str) -> None:
        with pytest.raises(ConfigError, match="cannot take a checkpointer"):
            load_graph(spec, checkpointer=InMemorySaver())

    def test_an_uncompiled_graph_is_compiled_and_takes_no_options(self) -> None:
        assert hasattr(load_graph("tests.batch._graphs:PLAN_ACT"), "ainvoke")
        with pytest.raises(ConfigError, match=r"a graph takes no options \(log\)"):
            load_graph("tests.batch._graphs:PLAN_ACT", log=None)
