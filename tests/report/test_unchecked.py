"""The audit's ``unchecked`` section: the share of accepts no check ran on, per step and per model or
tool, on logs written by the real drivers, the same in every audit path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from rich.console import Console

from retryctl.audit import DecisionLog
from retryctl.nodes import ControlledToolNode
from retryctl.report import analyse, audit_summary, render_summary, summarise
from retryctl.report._analyse import analyse_plain
from tests.report._logs import graph_log, verdict, write_verdicts


@tool
def multiply(a: float, b: float) -> str:
    """Multiply two numbers."""
    return f"{a * b:g}"


@tool
def add(a: float, b: float) -> str:
    """Add two numbers."""
    return f"{a + b:g}"


def _is_a_number(result: str, args: dict[str, Any]) -> bool:
    float(result)
    return True


@pytest.fixture(scope="module")
def tools_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three calls of ``multiply`` (no validators: unchecked) and one of ``add`` (validated)."""
    path = tmp_path_factory.mktemp("unchecked") / "tools.jsonl"
    calls = [
        {"name": "multiply", "args": {"a": 6, "b": 7}, "id": "c1"},
        {"name": "multiply", "args": {"a": 2, "b": 3}, "id": "c2"},
        {"name": "add", "args": {"a": 2, "b": 3}, "id": "c3"},
        {"name": "multiply", "args": {"a": 1, "b": 3}, "id": "c4"},
    ]
    with DecisionLog(path) as log:
        node = ControlledToolNode([multiply, add], validators={"add": [_is_a_number]}, log=log)
        graph = StateGraph(MessagesState)
        graph.add_node("tools", node)
        graph.add_edge(START, "tools")
        graph.compile().invoke({"messages": [AIMessage("", tool_calls=calls)]})
    return path


class TestUncheckedSection:
    def test_each_tool_s_share_of_unchecked_accepts(self, tools_log: Path) -> None:
        section = summarise(analyse([tools_log]))["unchecked"]
        assert (section["accepts"], section["unchecked"], section["share"]) == (4, 3, 0.75)
        assert section["by_target"] == [
            {"target": "multiply", "accepts": 3, "unchecked": 3, "share": 1.0, "kind": "tool"},
            {"target": "add", "accepts": 1, "unchecked": 0, "share": 0.0, "kind": "tool"},
        ]
        # The steps with an unchecked accept (add's call had its validator).
        assert [(r["step_id"], r["unchecked"]) for r in section["by_step"]] == [
            ("tool:multiply:c1", 1),
            ("tool:multiply:c2", 1),
            ("tool:multiply:c4", 1),
        ]

    def test_a_sampled_step_is_checked(self, tmp_path: Path) -> None:
        section = summarise(analyse([graph_log(tmp_path / "graph.jsonl")]))["unchecked"]
        assert section["accepts"] > 0 and section["unchecked"] == 0

    def test_records_written_before_the_field_count_as_checked(self, tmp_path: Path) -> None:
        path = write_verdicts(tmp_path / "new.jsonl", [("r", "q", verdict("accept", 0.95), "m")])
        line = json.loads(path.read_text())
        del line["checked"]  # as a log written before the field has it (the audit does not re-hash)
        old = tmp_path / "old.jsonl"
        old.write_text(json.dumps(line) + "\n")
        for analysis in (analyse([old]), analyse_plain([old])):
            section = summarise(analysis)["unchecked"]
            assert (section["accepts"], section["unchecked"]) == (1, 0)

    @pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
    def test_every_audit_path_gives_the_same_section(self, tools_log: Path, share: float) -> None:
        expected = summarise(analyse_plain([tools_log]))["unchecked"]
        _, fast = audit_summary(str(tools_log), min_bytes=0, first_share=share)  # two processes
        assert json.dumps(fast["unchecked"]) == json.dumps(expected)
        assert json.dumps(summarise(analyse([tools_log]))["unchecked"]) == json.dumps(expected)

    def test_the_text_report_shows_the_share_and_where(self, tools_log: Path) -> None:
        console = Console(record=True, width=160, color_system=None)
        render_summary(summarise(analyse([tools_log])), console)
        text = console.export_text()
        assert "Unchecked accepts: 3 of 4 (share 0.750): no check ran on their result" in text
        table = text[
            text.index("Unchecked accepts by model and tool") : text.index("Unchecked accepts by step")
        ]
        rows = [line.strip("│ ").split() for line in table.splitlines() if line.startswith("│")]
        assert rows == [["multiply", "│", "3", "│", "3", "│", "1.000"]]  # add: none unchecked, no row
