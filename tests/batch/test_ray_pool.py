"""RayExecutor's choice of actor and its resubmissions, on stand-in actor handles (no cluster): a task
goes to the least-loaded actor; a call Ray gave up on goes to another actor, which takes every later task
too; after ``retries`` tries the task comes back as its error line."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from retryctl.batch import Done, GraphJob, RayExecutor, Task
from retryctl.batch._executor import drive


class _Method:
    def __init__(self, actor: _Actor) -> None:
        self.actor = actor

    def remote(self, task: Task) -> _Ref:
        self.actor.calls.append(task.id)
        return _Ref(self.actor, task)


class _Ref:
    def __init__(self, actor: _Actor, task: Task) -> None:
        self.actor, self.task = actor, task

    def future(self) -> concurrent.futures.Future[Any]:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if self.actor.dead:
            done.set_exception(RuntimeError(f"actor {self.actor.name} died"))  # as Ray's RayActorError
        else:
            done.set_result(({"id": self.task.id, "status": "accepted"}, [], self.actor.name))
        return done


class _Actor:
    def __init__(self, name: str, *, dead: bool = False) -> None:
        self.name, self.dead = name, dead
        self.calls: list[str] = []
        self.run = _Method(self)


def _executor(*actors: _Actor, retries: int = 3) -> RayExecutor:
    executor = RayExecutor(address="127.0.0.1:1", workers=len(actors), max_in_flight=2, retries=retries)
    executor._actors = list(actors)
    executor._load = [0] * len(actors)
    return executor


def _run(executor: RayExecutor, n: int) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    job = GraphJob(spec="tests.batch._graphs:build")
    executor._job = job

    async def started(_job: Any) -> None:  # the actors are already "up"
        return None

    async def closed() -> None:
        return None

    executor.start = started  # type: ignore[method-assign,assignment]
    executor.close = closed  # type: ignore[method-assign]
    tasks = [Task(id=f"t{i}", question="add 1 1") for i in range(n)]

    def accept(_task: Task, done: Done) -> bool:
        lines.append(done.line)
        return False

    asyncio.run(drive(executor, job, tasks, accept=accept))
    return lines


class TestRayPool:
    def test_a_dead_actor_gets_one_call_and_then_none(self) -> None:
        dead, alive = _Actor("a", dead=True), _Actor("b")
        lines = _run(_executor(dead, alive), 6)
        assert sorted(line["id"] for line in lines) == [f"t{i}" for i in range(6)]
        assert all(line["status"] == "accepted" for line in lines)
        assert len(dead.calls) == 1  # the first call failed; the rest went to b
        assert sorted(alive.calls) == [f"t{i}" for i in range(6)]

    def test_after_its_tries_a_task_comes_back_as_an_error_line(self) -> None:
        lines = _run(_executor(_Actor("a", dead=True), _Actor("b", dead=True), retries=2), 1)
        assert [line["status"] for line in lines] == ["error"]
        assert "died" in lines[0]["error"]
