"""The verdicts in LangChain's own runs: a real ``BaseCallbackHandler`` on a ``create_agent`` run sees
each attempt's tags and each verdict's run, metadata and feedback-style score."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.tools import BaseTool, tool

from retryctl.controller import Budget, Policy
from retryctl.middleware import RetryController
from tests.middleware._scripted import ScriptedChat, call, say
from tests.middleware._support import Agent, ano_wait, multiply, multiply_backup, no_wait, records
from tests.nodes._lc_recorder import Recorder


def _down() -> tuple[BaseTool, list[int]]:
    """A ``multiply`` whose server is down: every call a transient fault (retried, then switched)."""
    calls = [0]

    @tool
    def multiply(a: float, b: float) -> float:
        """Multiply two numbers."""
        calls[0] += 1
        raise ConnectionError("connection reset by peer")

    return multiply, calls


class TestLangChainRuns:
    def test_flaky_tool_retried_then_switched(self, tmp_path: Path, mode: str) -> None:
        down, calls = _down()
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7}), say("42")])
        controller = RetryController(
            log=tmp_path / "log.jsonl",
            groups={"arithmetic": [down, multiply_backup]},
            sleep=lambda s: None,
            asleep=ano_wait,
        )
        agent = Agent(model, [down], controller, mode)
        recorder = Recorder()
        agent.config = {**agent.config, "callbacks": [recorder]}
        agent.ask("6 times 7?")
        logged = [r for r in records(tmp_path / "log.jsonl") if r["kind"] == "verdict"]
        runs = recorder.verdict_runs()
        # One verdict run per logged verdict, in order, each naming its action and attempt in tags.
        assert [(r.meta["retryctl.target"], r.meta["retryctl.action"]) for r in runs] == [
            (x["target"], x["action"]) for x in logged
        ]
        tool_actions = [
            r.meta["retryctl.action"] for r in runs if r.meta["retryctl.step_id"].startswith("tool:")
        ]
        assert "retry" in tool_actions and "switch" in tool_actions and tool_actions[-1] == "accept"
        assert calls[0] >= 2  # retried before it was switched
        for run, rec in zip(runs, logged, strict=True):
            assert f"retry:attempt:{rec['attempt']}" in run.tags
            assert f"retryctl:action:{rec['action']}" in run.tags
            assert run.meta["retryctl.record.hash"] == rec["hash"]  # the trace links to the audited record
            assert run.meta.get("retryctl.confidence") == rec["confidence"]
            # Unchecked (a fault, no check ran): the key is left out, as on the spans, not None.
            assert ("retryctl.confidence" in run.meta) == (rec["confidence"] is not None)
            assert run.meta["retryctl.checked"] == rec["checked"]
            assert run.meta["retryctl.reason"] == rec["reason"]
            assert run.parent is not None  # a child of the node that decided, not a trace of its own
        switch = next(r for r in runs if r.meta["retryctl.action"] == "switch")
        assert switch.meta["retryctl.switch_to"] == "multiply_backup"
        assert switch.meta["retryctl.error.class"] == "transient"
        # The feedback-style score, as a custom event on each verdict run.
        events = recorder.events_named("retryctl.verdict")
        assert [e.run_id for e in events] == [r.run_id for r in runs]
        first = events[0].data
        assert first["key"] == "retryctl.confidence" and first["comment"] == logged[0]["reason"]
        assert runs[0].outputs is not None
        for run, event, rec in zip(runs, events, logged, strict=True):
            assert run.outputs is not None
            # No score when nothing was checked: never a None score.
            assert run.outputs["feedback"].get("score") == rec["confidence"] == event.data.get("score")
            assert ("score" in event.data) == (rec["confidence"] is not None)
        assert any(rec["confidence"] is None for rec in logged)  # the down tool's faults: unchecked
        # Each tool attempt's own run carries its attempt and target: four on the tool that is down,
        # the fifth on its backup.
        tool_runs = recorder.starts_of("tool")
        assert [(r.meta["retryctl.attempt"], r.meta["retryctl.target"]) for r in tool_runs] == [
            (1, "multiply"),
            (2, "multiply"),
            (3, "multiply"),
            (4, "multiply"),
            (5, "multiply_backup"),
        ]
        assert [[t for t in r.tags if t.startswith("retry:")] for r in tool_runs] == [
            [f"retry:attempt:{n}"] for n in range(1, 6)
        ]
        # The model calls' own runs carry their attempt's tag and metadata.
        model_runs = recorder.starts_of("chat_model")
        assert len(model_runs) == 2
        assert all(
            "retry:attempt:1" in r.tags and r.meta["retryctl.target"] == "scripted" for r in model_runs
        )

    def test_budget_stop(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7})])
        controller = RetryController(log=tmp_path / "log.jsonl", budget=Budget(attempts=1))
        agent = Agent(model, [multiply], controller, mode)
        recorder = Recorder()
        agent.config = {**agent.config, "callbacks": [recorder]}
        agent.ask("6 times 7?")
        stops = [r for r in recorder.verdict_runs() if r.meta["retryctl.action"] == "stop"]
        assert stops, "the budget stop is a verdict run"
        assert all("retryctl:action:stop" in r.tags for r in stops)
        assert any("budget 'attempts'" in r.meta["retryctl.reason"] for r in stops)

    def test_final_answer_draws_carry_their_attempt(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[say("The answer is 4") for _ in range(4)])
        policy = Policy(weights={"validators": 1.0, "agreement": 1.0}, min_samples=3, max_samples=3)
        controller = RetryController(
            log=tmp_path / "log.jsonl", sample_final=True, model_policy=policy, sleep=no_wait, asleep=ano_wait
        )
        agent = Agent(model, [multiply], controller, mode)
        recorder = Recorder()
        agent.config = {**agent.config, "callbacks": [recorder]}
        agent.ask("2 plus 2?")
        draws = recorder.starts_of("chat_model")
        assert len(draws) == 3  # the answer and two more draws of it, one verdict
        assert all("retry:attempt:1" in d.tags and d.meta["retryctl.attempt"] == 1 for d in draws)
        (verdict,) = recorder.verdict_runs()
        assert "retryctl:action:accept" in verdict.tags

    def test_nothing_is_built_without_handlers(self, tmp_path: Path, mode: str) -> None:
        model = ScriptedChat(script=[say("42")])
        controller = RetryController(log=tmp_path / "log.jsonl")
        recorder = Recorder()  # attached to nothing: it must hear nothing
        Agent(model, [multiply], controller, mode).ask("6 times 7?")
        assert recorder.starts == [] and recorder.events == []


class TestAstreamEvents:
    """``astream_events``, LangChain's own consumer of the callbacks, shows the verdicts as they come."""

    def test_verdict_runs_and_custom_events_in_the_event_stream(self, tmp_path: Path) -> None:
        down, _ = _down()
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7}), say("42")])
        controller = RetryController(
            log=tmp_path / "log.jsonl",
            groups={"arithmetic": [down, multiply_backup]},
            sleep=lambda s: None,
            asleep=ano_wait,
        )
        agent = Agent(model, [down], controller, "async")

        async def collect() -> list[Any]:
            inputs = {"messages": [("user", "6 times 7?")]}
            return [e async for e in agent.graph.astream_events(inputs, agent.config, version="v2")]

        events = asyncio.run(collect())
        starts = [e for e in events if e["event"] == "on_chain_start" and e["name"] == "retryctl.verdict"]
        customs = [e for e in events if e["event"] == "on_custom_event" and e["name"] == "retryctl.verdict"]
        logged = [r for r in records(tmp_path / "log.jsonl") if r["kind"] == "verdict"]
        assert [s["metadata"]["retryctl.action"] for s in starts] == [r["action"] for r in logged]
        assert [c["data"]["comment"] for c in customs] == [r["reason"] for r in logged]
        assert any("retryctl:action:switch" in s["tags"] for s in starts)

    def test_an_async_handler_hears_every_verdict_in_order(self, tmp_path: Path) -> None:
        # The verdict run is told through LangChain's sync callback manager (a verdict is recorded in
        # sync code); an async handler's coroutines then run to completion on LangChain's worker loop,
        # before the call goes on, so none is lost and the order holds.
        heard: list[str] = []

        class Heard(AsyncCallbackHandler):
            async def on_chain_start(self, serialized: Any, inputs: Any, **kw: Any) -> None:
                if kw.get("name") == "retryctl.verdict":
                    heard.append(kw["metadata"]["retryctl.action"])

        down, _ = _down()
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7}), say("42")])
        controller = RetryController(
            log=tmp_path / "log.jsonl",
            groups={"arithmetic": [down, multiply_backup]},
            sleep=lambda s: None,
            asleep=ano_wait,
        )
        agent = Agent(model, [down], controller, "async")
        agent.config = {**agent.config, "callbacks": [Heard()]}
        agent.ask("6 times 7?")
        logged = [r["action"] for r in records(tmp_path / "log.jsonl") if r["kind"] == "verdict"]
        assert heard == logged and "switch" in heard
