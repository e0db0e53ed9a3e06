"""The batch's turn (``retryctl._turn``): one task's CPU work at a time, FIFO, given up at every library
wait; soft (a hidden wait never deadlocks); released on exceptions, interrupts and cancellation; a no-op
outside a batch. Through ``run_batch`` with real LangGraph graphs (one over real HTTP), and the Turn on
its own for the cases a graph cannot stage deterministically."""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

import retryctl.batch._runner
from retryctl._turn import Turn, yielded_turn, yielding
from retryctl.batch import BatchConfig, ResultsFile, Task, load_graph, run_batch
from retryctl.exceptions import ConfigError
from retryctl.models import OpenAIBackend, RetrySettings
from retryctl.models._base import sample_within
from tests.models._fault_server import FaultServer

Events = list[tuple[str, str]]


@pytest.fixture
def patient_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch's turn with a 10 s bound, for tests of the order: on a busy test machine a first
    LangGraph run or a garbage collection can hold the turn past the real 50 ms bound, which rightly
    passes it on (tested on its own below) but would make the order these tests check vary."""
    monkeypatch.setattr(retryctl.batch._runner, "Turn", functools.partial(Turn, overstay_s=10.0))


def _tasks(*questions: str) -> list[Task]:
    return [Task(id=f"t{i}", question=q) for i, q in enumerate(questions)]


async def _batch(graph: Any, tasks: list[Task], path: Path, **config: Any) -> Any:
    results = ResultsFile(path)
    try:
        run = run_batch(graph, tasks, results, config=BatchConfig(retry_wait_s=0, breaker_k=None, **config))
        return await asyncio.wait_for(run, timeout=60)  # a deadlock fails the test instead of hanging it
    finally:
        results.close()


async def _cpu(events: Events, who: str, slices: int = 10) -> None:
    """A CPU segment made of many awaits, as LangGraph's are (each one lets the loop run others)."""
    events.append(("enter", who))
    for _ in range(slices):
        await asyncio.sleep(0)
    events.append(("exit", who))


def _interleaved(events: Events) -> bool:
    """Whether some segment began while another task's segment was still running."""
    inside: str | None = None
    for kind, who in events:
        if kind == "enter":
            if inside is not None:
                return True
            inside = who
        else:
            inside = None
    return False


class State(MessagesState):
    result: dict[str, Any] | None


def _http_graph(backend: OpenAIBackend, events: Events) -> Any:
    """think (CPU) -> ask (a real HTTP completion, drawn as the sampling driver draws) -> conclude (CPU)."""

    async def think(state: State) -> dict[str, Any]:
        await _cpu(events, str(state["messages"][0].content))
        return {}

    async def ask(state: State) -> dict[str, Any]:
        # A graph's own await of a backend gives the turn up as the library's drivers do: the backend
        # knows nothing of batches.
        async with yielded_turn():
            [drawn] = await sample_within(backend, [{"role": "user", "content": "6 x 7?"}])
        return {"result": {"status": "accepted", "answer": drawn.text, "confidence": 1.0, "reason": ""}}

    async def conclude(state: State) -> dict[str, Any]:
        await _cpu(events, str(state["messages"][0].content))
        return {}

    graph = StateGraph(State)
    graph.add_node("think", think)
    graph.add_node("ask", ask)
    graph.add_node("conclude", conclude)
    graph.add_edge(START, "think")
    graph.add_edge("think", "ask")
    graph.add_edge("ask", "conclude")
    graph.add_edge("conclude", END)
    return graph.compile()


class TestTurnInABatch:
    @pytest.mark.parametrize("turn", [True, False])
    @pytest.mark.usefixtures("patient_turn")
    def test_cpu_segments_do_not_interleave_over_real_http(
        self, tmp_path: Path, fault_server: FaultServer, turn: bool
    ) -> None:
        events: Events = []

        async def main() -> Any:
            backend = OpenAIBackend(model="fault", base_url=fault_server.url, retry=RetrySettings(attempts=1))
            try:
                # Warm up first (the SDK's lazy imports, the first connection), as a long batch is.
                await backend.sample([{"role": "user", "content": "warm up"}])
                graph = _http_graph(backend, events)
                tasks = _tasks(*(f"q{i}" for i in range(6)))
                return await _batch(graph, tasks, tmp_path / "r.jsonl", concurrency=4, turn=turn)
            finally:
                await backend.aclose()

        outcome = asyncio.run(main())
        assert [line["status"] for line in outcome.lines] == ["accepted"] * 6
        assert len(fault_server.requests) == 7
        # With the turn, a task runs from its start to its request, and from its answer to its end,
        # before the next task runs; without it, the tasks advance in lock-step (the control).
        assert _interleaved(events) is not turn
        assert outcome.turn_off is None
        if turn:
            starts = [who for kind, who in events if kind == "enter"][:4]
            assert starts == ["q0", "q1", "q2", "q3"]  # first in, first served

    @pytest.mark.parametrize("turn", [True, False])
    @pytest.mark.usefixtures("patient_turn")
    def test_a_finishing_task_hands_its_turn_to_the_task_taking_its_place(
        self, tmp_path: Path, turn: bool
    ) -> None:
        events: Events = []

        async def main() -> Any:
            answered = asyncio.Event()
            waiting: list[str] = []

            async def begin(state: State) -> dict[str, Any]:
                await _cpu(events, f"{state['messages'][0].content} start")
                return {}

            async def call(state: State) -> dict[str, Any]:
                async with yielded_turn():  # a model call: both first tasks' answers arrive at once
                    waiting.append(str(state["messages"][0].content))
                    if len(waiting) == 2:
                        asyncio.get_running_loop().call_soon(answered.set)
                    await answered.wait()
                return {"result": {"status": "accepted", "answer": "ok", "confidence": 1.0, "reason": ""}}

            async def end(state: State) -> dict[str, Any]:
                await _cpu(events, f"{state['messages'][0].content} end")
                return {}

            graph = StateGraph(State)
            for name, node in (("begin", begin), ("call", call), ("end", end)):
                graph.add_node(name, node)
            graph.add_edge(START, "begin")
            graph.add_edge("begin", "call")
            graph.add_edge("call", "end")
            graph.add_edge("end", END)
            tasks = _tasks("a", "b", "c")
            return await _batch(graph.compile(), tasks, tmp_path / "r.jsonl", concurrency=2, turn=turn)

        outcome = asyncio.run(main())
        assert len(outcome.lines) == 3 and outcome.turn_off is None
        segments = [who for kind, who in events if kind == "enter"]
        if turn:
            # "c" takes "a"'s place and its turn: it starts before "b", whose answer was waiting, ends.
            assert segments == ["a start", "b start", "a end", "c start", "b end", "c end"]
            assert not _interleaved(events)
        else:
            assert _interleaved(events)

    def test_the_library_step_keeps_the_turn_on(self, tmp_path: Path) -> None:
        graph = load_graph("tests.batch._graphs:build")
        tasks = _tasks(*(f"add {i} 2" for i in range(8)), "hard one")
        outcome = asyncio.run(_batch(graph, tasks, tmp_path / "r.jsonl", concurrency=4))
        assert sorted(line["status"] for line in outcome.lines) == ["accepted"] * 8 + ["stopped"]
        assert outcome.turn_off is None

    def test_a_graph_awaiting_its_own_io_while_holding_the_turn_does_not_deadlock(
        self, tmp_path: Path
    ) -> None:
        async def main() -> Any:
            ready = asyncio.Event()

            async def node(state: State) -> dict[str, Any]:
                if state["messages"][0].content == "wait":
                    await ready.wait()  # an await the library cannot see, holding the turn
                else:
                    ready.set()  # runs only once the waiting task's turn is given up
                return {"result": {"status": "accepted", "answer": "ok", "confidence": 1.0, "reason": ""}}

            graph = StateGraph(State)
            graph.add_node("node", node)
            graph.add_edge(START, "node")
            graph.add_edge("node", END)
            return await _batch(graph.compile(), _tasks("wait", "set"), tmp_path / "r.jsonl", concurrency=2)

        outcome = asyncio.run(main())
        assert sorted(line["id"] for line in outcome.lines) == ["t0", "t1"]
        assert outcome.turn_off is not None and "idle" in outcome.turn_off

    def test_an_interrupted_task_gives_the_turn_back(self, tmp_path: Path) -> None:
        async def node(state: State) -> dict[str, Any]:
            if state["messages"][0].content == "ask":
                interrupt("which one?")
            return {"result": {"status": "accepted", "answer": "ok", "confidence": 1.0, "reason": ""}}

        graph = StateGraph(State)
        graph.add_node("node", node)
        graph.add_edge(START, "node")
        graph.add_edge("node", END)
        compiled = graph.compile(checkpointer=InMemorySaver())
        outcome = asyncio.run(
            _batch(compiled, _tasks("ask", "ask", "go", "go"), tmp_path / "r.jsonl", concurrency=2)
        )
        statuses = {line["id"]: line["status"] for line in outcome.lines}
        assert statuses == {"t0": "error", "t1": "error", "t2": "accepted", "t3": "accepted"}
        assert outcome.turn_off is None  # a turn kept by an ended task would have switched it off

    def test_a_failing_task_gives_the_turn_back_between_tries(self, tmp_path: Path) -> None:
        class Down:
            async def ainvoke(self, input: Any, config: Any = None) -> Any:
                raise ConnectionError("model server refused the connection")

        outcome = asyncio.run(_batch(Down(), _tasks("a", "b", "c"), tmp_path / "r.jsonl", concurrency=3))
        assert [line["tries"] for line in outcome.lines] == [3, 3, 3]
        assert outcome.turn_off is None

    def test_cancelling_the_batch_cancels_its_tasks_and_starts_no_more(self, tmp_path: Path) -> None:
        async def main() -> tuple[list[str], set[asyncio.Task[Any]]]:
            started: list[str] = []

            async def node(state: State) -> dict[str, Any]:
                started.append(str(state["messages"][0].content))
                async with yielded_turn():
                    await asyncio.Event().wait()  # a model that never answers
                return {}

            graph = StateGraph(State)
            graph.add_node("node", node)
            graph.add_edge(START, "node")
            graph.add_edge("node", END)
            batch = asyncio.create_task(
                _batch(graph.compile(), _tasks(*"abcde"), tmp_path / "r.jsonl", concurrency=2)
            )
            while len(started) < 2:
                await asyncio.sleep(0.001)
            batch.cancel()
            with pytest.raises(asyncio.CancelledError):
                await batch
            await asyncio.sleep(0.01)
            return started, asyncio.all_tasks() - {asyncio.current_task()}

        started, left = asyncio.run(main())
        assert started == ["a", "b"] and not left

    def test_the_turn_can_be_turned_off_and_must_be_a_bool(self) -> None:
        assert BatchConfig().turn is True
        with pytest.raises(ConfigError, match="turn"):
            BatchConfig(turn="yes")  # type: ignore[arg-type]


class TestTurn:
    def test_waiters_take_the_turn_first_in_first_out(self) -> None:
        events: Events = []

        async def task(turn: Turn, who: str) -> None:
            async with turn.hold():
                for _ in range(2):
                    await _cpu(events, who)
                    async with yielded_turn():
                        await asyncio.sleep(0.001)

        async def main() -> None:
            turn = Turn()
            await asyncio.gather(*(task(turn, f"w{i}") for i in range(5)))

        asyncio.run(main())
        assert not _interleaved(events)
        assert [who for kind, who in events if kind == "enter"][:5] == ["w0", "w1", "w2", "w3", "w4"]

    def test_a_holder_computing_too_long_loses_the_turn_but_keeps_running(self) -> None:
        events: Events = []

        async def hog(turn: Turn) -> None:
            async with turn.hold():
                events.append(("enter", "hog"))
                until = time.perf_counter() + 0.2
                while time.perf_counter() < until and ("enter", "next") not in events:
                    await asyncio.sleep(0)
                events.append(("exit", "hog"))

        async def main() -> Turn:
            # busy_fraction 0: the loop always counts as busy, so an overstay is a preemption.
            turn = Turn(overstay_s=0.01, busy_fraction=0.0)

            async def following() -> None:
                async with turn.hold():
                    events.append(("enter", "next"))

            await asyncio.gather(hog(turn), following())
            return turn

        turn = asyncio.run(main())
        assert events == [("enter", "hog"), ("enter", "next"), ("exit", "hog")]
        assert turn.preempted == 1 and not turn.off

    def test_an_exception_gives_the_turn_back(self) -> None:
        async def main() -> list[str]:
            turn = Turn(overstay_s=60)
            order: list[str] = []

            async def failing() -> None:
                async with turn.hold():
                    await asyncio.sleep(0)
                    raise RuntimeError("boom")

            async def after() -> None:
                async with turn.hold():
                    order.append("after ran")

            results = await asyncio.gather(failing(), after(), return_exceptions=True)
            assert isinstance(results[0], RuntimeError)
            return order

        assert asyncio.run(asyncio.wait_for(main(), timeout=10)) == ["after ran"]

    def test_a_cancelled_waiter_leaves_the_queue_and_a_granted_one_passes_the_turn_on(self) -> None:
        async def main() -> list[str]:
            turn = Turn(overstay_s=60)
            ran: list[str] = []
            release = asyncio.Event()
            queued: list[asyncio.Task[None]] = []

            async def holder() -> None:
                async with turn.hold():
                    await release.wait()
                # The turn went to "a" just now; cancel "a" before it runs: it must pass the turn on.
                queued[0].cancel()

            async def waiter(who: str) -> None:
                async with turn.hold():
                    ran.append(who)

            first = asyncio.create_task(holder())
            await asyncio.sleep(0)
            queued.extend(asyncio.create_task(waiter(w)) for w in ("a", "b", "c"))
            await asyncio.sleep(0)
            queued[1].cancel()  # "b" is cancelled while queued
            await asyncio.sleep(0)
            release.set()
            await asyncio.gather(first, *queued, return_exceptions=True)
            return ran

        assert asyncio.run(asyncio.wait_for(main(), timeout=10)) == ["c"]

    def test_gathered_waits_give_the_turn_up_once_and_take_it_back_once(self) -> None:
        async def main() -> tuple[list[str], int]:
            turn = Turn(overstay_s=60)
            order: list[str] = []

            async def request(i: int) -> None:
                async with yielded_turn():
                    await asyncio.sleep(0.01 * (i + 1))

            async def gathering() -> None:
                async with turn.hold() as ticket:
                    await asyncio.gather(*(request(i) for i in range(3)))
                    order.append(f"gathered, holding: {ticket.held}")

            async def other() -> None:
                await asyncio.sleep(0)  # queue behind the gathering task
                async with turn.hold():
                    order.append("other ran during the requests")

            await asyncio.gather(gathering(), other())
            return order, turn.grants

        order, grants = asyncio.run(main())
        assert order == ["other ran during the requests", "gathered, holding: True"]
        assert grants == 3  # gathering, other, gathering again (not once per request)

    def test_yielding_wraps_a_sleep_given_to_tenacity(self) -> None:
        async def main() -> list[str]:
            turn = Turn(overstay_s=60)
            order: list[str] = []

            async def sleeper() -> None:
                async with turn.hold():
                    await yielding(asyncio.sleep)(0.01)
                    order.append("sleeper")

            async def other() -> None:
                await asyncio.sleep(0)
                async with turn.hold():
                    order.append("other")

            await asyncio.gather(sleeper(), other())
            return order

        assert asyncio.run(main()) == ["other", "sleeper"]

    def test_outside_a_batch_it_does_nothing(self) -> None:
        async def main() -> None:
            async with yielded_turn():
                await asyncio.sleep(0)
            assert type(yielded_turn()) is type(yielded_turn()) and yielded_turn() is yielded_turn()

        asyncio.run(main())

    def test_on_another_threads_event_loop_it_does_nothing(self) -> None:
        async def main() -> bool:
            turn = Turn(overstay_s=60)
            async with turn.hold() as ticket:

                def in_a_thread() -> bool:
                    async def nested() -> bool:
                        async with yielded_turn():  # the batch's turn lives on another loop
                            await asyncio.sleep(0)
                        return True

                    return asyncio.run(nested())

                done = await asyncio.to_thread(in_a_thread)
                return done and ticket.held

        assert asyncio.run(main()) is True
