"""Two worker processes share one breaker (Redis) and one LangGraph thread (PostgreSQL).

Real servers on 127.0.0.1, started by ``make services``; found at ``RETRYCTL_REDIS_URL`` (default
``redis://127.0.0.1:6390/0``) and ``RETRYCTL_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5490/postgres``). Unreachable, the tests skip; under ``CI`` they fail.
Workers are real OS processes started with ``spawn``: nothing is inherited but what is sent to them.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import multiprocessing
import operator
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel
from langgraph.types import Command

from retryctl.controller import Breaker, BreakerConfig, BreakerState, Policy
from retryctl.exceptions import BreakerOpen
from retryctl.nodes import ControlledStep, StepResult
from retryctl.runtime import RedisBreakerStore
from retryctl.testing import ScriptedBackend

SPAWN = multiprocessing.get_context("spawn")
KEY = "search"
BREAKER = BreakerConfig(failure_threshold=3, cooldown_s=2.0, half_open_max_calls=3, success_threshold=2)


class Worker:
    """The test's end of a pipe to a worker process."""

    def __init__(self, conn: Connection, proc: multiprocessing.process.BaseProcess) -> None:
        self.conn, self.proc = conn, proc

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def recv(self) -> Any:
        # A worker that died would leave recv() waiting forever: poll, then say how it ended.
        assert self.conn.poll(120), f"worker {self.proc.pid} gave no reply (exit code {self.proc.exitcode})"
        return self.conn.recv()

    def __call__(self, message: Any) -> Any:
        self.send(message)
        return self.recv()


@contextmanager
def worker(target: Callable[..., None], *args: Any) -> Iterator[Worker]:
    """A spawned process running ``target(conn, *args)`` until it receives ``None``."""
    ours, theirs = SPAWN.Pipe()
    proc = SPAWN.Process(target=target, args=(theirs, *args))
    proc.start()
    try:
        yield Worker(ours, proc)
    finally:
        ours.send(None)
        proc.join(60)
        if proc.exitcode is None:
            proc.kill()
        assert proc.exitcode == 0, f"worker {proc.pid} ended with {proc.exitcode}"


# -- the breaker: one key in Redis, two processes --------------------------------------------------


def breaker_worker(conn: Connection, url: str, namespace: str) -> None:
    """Serves breaker commands for the test until it sends ``None``."""
    store = RedisBreakerStore.from_url(url, namespace=namespace)
    breaker = Breaker(BREAKER, store=store)
    while (command := conn.recv()) is not None:
        op, arg = command
        if op == "ready":
            conn.send(os.getpid())
        elif op == "fail":
            conn.send([breaker.record_failure(KEY).value for _ in range(arg)])
        elif op == "succeed":
            conn.send(breaker.record_success(KEY).value)
        elif op == "call":
            try:
                breaker.before_call(KEY)
                conn.send({"admitted": True})
            except BreakerOpen as err:
                conn.send({"admitted": False, "failures": err.failures, "retry_at": err.retry_at})
        elif op == "race":
            start_at, calls = arg
            while store.server_time() < start_at:
                pass
            first = store.server_time()
            admitted = sum(breaker.allow(KEY) for _ in range(calls))
            conn.send({"admitted": admitted, "first": first, "last": store.server_time()})
    store.close()


class TestSharedBreaker:
    def test_one_worker_opens_it_the_other_is_refused_and_probes_are_shared(self, redis_url: str) -> None:
        namespace = f"test:{uuid.uuid4().hex}"
        with (
            RedisBreakerStore.from_url(redis_url, namespace=namespace) as store,
            worker(breaker_worker, redis_url, namespace) as a,
            worker(breaker_worker, redis_url, namespace) as b,
        ):
            assert a(("ready", None)) != b(("ready", None))

            assert a(("fail", 3)) == ["closed", "closed", "open"]
            opened_at = store.get(KEY).opened_at
            assert opened_at is not None
            assert b(("call", None)) == {
                "admitted": False,
                "failures": 3,
                "retry_at": opened_at + BREAKER.cooldown_s,
            }

            # Both race for the half-open probes from the same instant on the server's clock.
            start_at = opened_at + BREAKER.cooldown_s + 0.3
            a.send(("race", (start_at, 100)))
            b.send(("race", (start_at, 100)))
            races = [a.recv(), b.recv()]
            assert sum(r["admitted"] for r in races) == BREAKER.half_open_max_calls
            assert max(r["first"] for r in races) < min(r["last"] for r in races), races
            record = store.get(KEY)
            assert (record.state, record.probes) == (BreakerState.HALF_OPEN, BREAKER.half_open_max_calls)

            # success_threshold=2 counts successes from either worker.
            assert a(("succeed", None)) == "half_open"
            assert b(("succeed", None)) == "closed"
            assert a(("call", None)) == {"admitted": True}
            store.reset()


# -- the thread: one LangGraph thread_id checkpointed in PostgreSQL, two processes ------------------


class NotedState(MessagesState):
    notes: Annotated[list[str], operator.add]
    """Which worker process ran which node."""
    result: StepResult
    """How the controlled step ended."""


def noter(node: str) -> RunnableLambda[NotedState, dict[str, Any]]:
    def note(state: NotedState, config: RunnableConfig) -> dict[str, Any]:
        worker_name = config.get("configurable", {})["worker"]
        return {"notes": [f"{node}@{worker_name}:{os.getpid()}"]}

    return RunnableLambda(note, name=node)


def build_graph(saver: PostgresSaver) -> CompiledStateGraph[Any, Any, Any, Any]:
    """intake → a controlled step that asks the user (its samples disagree) → wrap-up."""
    policy = Policy(
        stopping="sc-3", min_samples=3, max_samples=3, max_refines=0, low_confidence=("ask_user",)
    )
    step = ControlledStep(ScriptedBackend(["1", "2", "3"], cycle=True), policy=policy, step_id="solve")
    graph = StateGraph(NotedState)
    graph.add_node("intake", noter("intake"))
    graph.add_node("solve", step.compile())
    graph.add_node("wrap", noter("wrap"))
    graph.add_edge(START, "intake")
    graph.add_edge("intake", "solve")
    graph.add_edge("solve", "wrap")
    graph.add_edge("wrap", END)
    return graph.compile(checkpointer=saver)


def graph_worker(conn: Connection, url: str, thread_id: str, name: str) -> None:
    """Runs (or resumes, given a reply) the thread once per command; answers with what it saw."""
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()  # idempotent: each worker may be the first to reach a new database
        app = build_graph(saver)
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "worker": name}}
        while (reply := conn.recv()) is not None:
            payload: dict[str, Any] | Command[Any]
            payload = {"messages": [HumanMessage("pick one")]} if reply == "start" else Command(resume=reply)
            out = app.invoke(payload, config)
            conn.send(
                {
                    "pid": os.getpid(),
                    "interrupts": [i.value for i in out.get("__interrupt__", ())],
                    "notes": out.get("notes", []),
                    "messages": [[type(m).__name__, m.content] for m in out["messages"]],
                    "result": out.get("result"),
                }
            )


class TestSharedThread:
    def test_a_thread_paused_in_one_worker_is_finished_by_another(self, postgres_url: str) -> None:
        thread_id = f"job-{uuid.uuid4().hex}"
        with worker(graph_worker, postgres_url, thread_id, "A") as a:
            first = a("start")
        [asked] = first["interrupts"]
        assert asked["type"] == "retryctl.ask_user" and asked["step_id"] == "solve"
        assert first["notes"] == [f"intake@A:{first['pid']}"]

        # Worker A has exited: the pause lives in PostgreSQL, where this process reads it too.
        with PostgresSaver.from_conn_string(postgres_url) as saver:
            paused = build_graph(saver).get_state({"configurable": {"thread_id": thread_id}})
        assert paused.next == ("solve",)
        assert [i.value["step_id"] for i in paused.interrupts] == ["solve"]

        with worker(graph_worker, postgres_url, thread_id, "B") as b:
            second = b({"action": "answer", "answer": "2"})
        assert second["pid"] != first["pid"]
        assert second["interrupts"] == []
        assert second["notes"] == [f"intake@A:{first['pid']}", f"wrap@B:{second['pid']}"]
        assert second["result"]["status"] == "answered_by_user"
        assert second["messages"][0] == ["HumanMessage", "pick one"]
        assert ["AIMessage", "2"] in second["messages"]

        with PostgresSaver.from_conn_string(postgres_url) as saver:
            done = build_graph(saver).get_state({"configurable": {"thread_id": thread_id}})
        assert done.next == ()
        assert done.values["notes"] == second["notes"]


# -- langgraph.json: what LangGraph's server tooling loads ------------------------------------------

LANGGRAPH_JSON = Path(__file__).resolve().parents[2] / "langgraph.json"


def load_graph_spec(spec: str) -> object:
    """Import ``module.path:name`` or ``./file.py:name`` the way the server resolves it."""
    where, _, name = spec.rpartition(":")
    if "/" in where:
        path = (LANGGRAPH_JSON.parent / where).resolve()
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        assert module_spec is not None and module_spec.loader is not None, spec
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


class TestLangGraphJson:
    def test_every_graph_it_names_is_a_compiled_graph(self) -> None:
        config = json.loads(LANGGRAPH_JSON.read_text())
        assert config["dependencies"] == ["."]
        assert config["graphs"], "langgraph.json names no graph"
        for graph_id, spec in config["graphs"].items():
            graph = load_graph_spec(spec)
            if not isinstance(graph, Pregel) and callable(graph):
                graph = graph(RunnableConfig(configurable={}))
            assert isinstance(graph, CompiledStateGraph), (graph_id, spec, type(graph))

    def test_the_demo_runs_on_the_checkpointer_a_server_lends_it(self) -> None:
        from retryctl.agent._server import graph

        assert {"solve", "finish"} <= set(graph.get_graph().nodes)
        config: RunnableConfig = {"configurable": {"thread_id": "t"}}
        # Alone it refuses to run: an interactive graph without a checkpointer would lose its pauses.
        with pytest.raises(RuntimeError, match="checkpointer"):
            graph.get_state(config)
        # The server puts its own checkpointer in place, as `langgraph dev` does with graph.copy().
        served = graph.copy(update={"checkpointer": InMemorySaver()})
        assert served.get_state(config).values == {}
