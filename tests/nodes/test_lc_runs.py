"""``ControlledStep``'s attempts and verdicts in LangChain's own runs, as a real callback handler
sees them (the middleware's: tests/middleware/test_lc_runs.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from retryctl.audit import read_records
from retryctl.controller import Policy
from retryctl.nodes import ControlledStep, ControlledToolNode
from tests.nodes._lc_recorder import Recorder
from tests.nodes._support import Sleeps, user
from tests.nodes.test_tool_node import Calls, calling, graph_of


def _says_42(text: str) -> bool:
    return "42" in text


@pytest.mark.parametrize("mode", ["sync", "async"])
class TestStepRuns:
    def test_each_attempt_and_verdict(self, tmp_path: Path, mode: str) -> None:
        model = GenericFakeChatModel(
            messages=iter([AIMessage("The answer is 13"), AIMessage("The answer is 42")])
        )
        policy = Policy(stopping="sc-1", min_samples=1, max_samples=1, weights={"validators": 1.0})
        step = ControlledStep(model, policy=policy, validators=[_says_42], log=tmp_path / "log.jsonl")
        recorder = Recorder()
        config: Any = {"callbacks": [recorder], "configurable": {"thread_id": "s1"}}
        graph: Any = step.compile()
        if mode == "sync":
            graph.invoke(user("6 * 7?"), config)
        else:
            asyncio.run(graph.ainvoke(user("6 * 7?"), config))
        # The refined attempt is the second: each model call's run carries its own attempt.
        calls = recorder.starts_of("chat_model")
        assert [[t for t in c.tags if t.startswith("retry:")] for c in calls] == [
            ["retry:attempt:1"],
            ["retry:attempt:2"],
        ]
        assert [c.meta["retryctl.attempt"] for c in calls] == [1, 2]
        logged = [r for r in read_records(tmp_path / "log.jsonl") if r.kind == "verdict"]
        runs = recorder.verdict_runs()
        assert [r.meta["retryctl.action"] for r in runs] == ["refine", "accept"]
        assert [r.meta["retryctl.record.hash"] for r in runs] == [r.hash for r in logged]
        assert "retryctl:action:refine" in runs[0].tags and "retry:attempt:1" in runs[0].tags
        assert "retryctl:action:accept" in runs[1].tags and "retry:attempt:2" in runs[1].tags
        assert runs[1].meta["retryctl.confidence"] == logged[1].confidence
        events = recorder.events_named("retryctl.verdict")
        assert [e.data.get("score") for e in events] == [r.confidence for r in logged]


@pytest.mark.parametrize("mode", ["sync", "async"])
class TestToolNodeRuns:
    def test_each_tool_attempt_and_verdict(self, mode: str) -> None:
        node = ControlledToolNode(
            [Calls().calculator([ConnectionError("down")])], sleep=Sleeps(), asleep=Sleeps().asleep
        )
        recorder = Recorder()
        graph = graph_of(node)
        config: Any = {"callbacks": [recorder]}
        if mode == "sync":
            graph.invoke(calling(("calculator", {"expression": "6*7"})), config)
        else:
            asyncio.run(graph.ainvoke(calling(("calculator", {"expression": "6*7"})), config))
        tools = recorder.starts_of("tool")
        assert [(t.meta["retryctl.attempt"], t.meta["retryctl.target"]) for t in tools] == [
            (1, "calculator"),
            (2, "calculator"),
        ]
        assert ["retry:attempt:1" in tools[0].tags, "retry:attempt:2" in tools[1].tags] == [True, True]
        runs = recorder.verdict_runs()
        assert [r.meta["retryctl.action"] for r in runs] == ["retry", "accept"]
        assert "retryctl.record.hash" not in runs[0].meta  # no log: no record to name
