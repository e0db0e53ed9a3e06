"""The audit counts what happened, on logs that real agents wrote.

A ``create_agent`` agent under :class:`~retryctl.middleware.RetryController` logs every model and tool
call with the run's ledger, which all of them share: each record's ``budget.used`` is the run's totals
so far, and ``budget.charged`` what its own attempt added. The audit must count each call's spend
once (summing the run's totals step after step counted a five-call run as 25 samples). The agents
here use a scripted chat model whose every answer carries known token usage, so that every figure of
the audit (samples, USD, tokens in the records, attempts, samples per step, the story, the diff, the
HTML chart) can be compared with what the agent did. ``ControlledStep`` logs (a step's own ledger) and
``ControlledToolNode`` logs (a ledger its calls share, here with a step) are checked the same way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from typer.testing import CliRunner

from retryctl.audit import DecisionLog
from retryctl.cli import app
from retryctl.controller import Budget, Ledger, Policy
from retryctl.nodes import ControlledStep, ControlledToolNode
from retryctl.report import analyse, audit_log, audit_summary, summarise
from retryctl.report._analyse import analyse_plain
from retryctl.testing import ScriptedBackend
from tests.middleware._support import no_wait
from tests.report._logs import (
    BACKUP_TOKENS,
    TOKENS,
    USD,
    agent_log,
    agent_with_tools,
    failover_log,
    flaky_tool,
)

runner = CliRunner()


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module", params=["sync", "async"])
def agent(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("agent") / "decisions.jsonl"
    model = agent_log(path, str(request.param))
    return path, len(model.seen)


def _target(summary: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in summary["cost"]["by_target"] if r["target"] == name)


class TestMiddlewareLog:
    def test_the_records_say_whose_ledger_and_what_each_attempt_charged(
        self, agent: tuple[Path, int]
    ) -> None:
        path, _ = agent
        verdicts = [r for r in _records(path) if r["kind"] == "verdict"]
        assert {r["budget"]["scope"] for r in verdicts} == {"run"}
        charged = [r["budget"]["charged"] for r in verdicts]
        # Tokens: what the model's answers reported, each counted once.
        assert sum(c.get("input_tokens", 0) for c in charged) == sum(i for i, _ in TOKENS)
        assert sum(c.get("output_tokens", 0) for c in charged) == sum(o for _, o in TOKENS)
        assert sum(c.get("usd", 0) for c in charged) == pytest.approx(USD)
        # Every model call and every tool attempt charged one attempt.
        assert sum(c.get("attempts", 0) for c in charged) == 5 + 3
        # Each question is a run with a ledger of its own: what its attempts charged adds up to its
        # ledger's totals at its last verdict.
        first, second = verdicts[:7], verdicts[7:]
        assert [r["step_id"] for r in second] == ["model:4"]
        for run in (first, second):
            used = run[-1]["budget"]["used"]
            for name in ("attempts", "samples", "input_tokens", "output_tokens", "usd"):
                assert sum(r["budget"]["charged"].get(name, 0) for r in run) == pytest.approx(used[name])
        assert [c.get("usd") for c in charged if "usd" in c] == [0.00014, 0.00021, 0.00028, 0.00014]
        tools = [c for r, c in zip(verdicts, charged, strict=True) if r["step_id"].startswith("tool:")]
        assert tools == [{"attempts": 1.0}] * 3  # a tool call charges no sample, token or dollar

    def test_samples_and_cost_are_the_calls_made(self, agent: tuple[Path, int]) -> None:
        path, model_calls = agent
        assert model_calls == 5
        summary = summarise(analyse([path]))
        assert summary["cost"]["total_samples"] == model_calls
        assert summary["cost"]["total_usd"] == pytest.approx(USD)
        model = _target(summary, "scripted")
        assert (model["kind"], model["samples"], model["usd"]) == ("model", 5.0, pytest.approx(USD))
        assert model["attempts"] == 5  # one verdict per model call (the failed one is a retry)
        for name, attempts in (("multiply", 1), ("lookup", 2)):
            row = _target(summary, name)
            assert (row["kind"], row["samples"], row["usd"], row["attempts"]) == ("tool", 0.0, 0.0, attempts)
        assert summary["verdicts"] == {"accept": 6, "retry": 2}

    def test_samples_per_step_and_per_question(self, agent: tuple[Path, int]) -> None:
        path, _ = agent
        summary = summarise(analyse([path]))
        per_step = {r["step_id"]: r for r in summary["per_step"]}
        samples = {k: (r["avg_samples"], r["avg_attempts"]) for k, r in per_step.items()}
        assert samples == {
            "model:1": (1.0, 1.0),
            "model:2": (1.0, 1.0),
            "model:3": (2.0, 2.0),  # the call that failed, then the answer
            "model:4": (1.0, 1.0),
            "tool:multiply:c1": (0.0, 1.0),
            "tool:lookup:c2": (0.0, 2.0),
        }
        assert sorted(summary["samples_hist"]) == [[0.0, 2], [1.0, 3], [2.0, 1]]
        assert sum(k * n for k, n in summary["samples_hist"]) == 5

    def test_every_path_of_the_audit_counts_the_same(self, agent: tuple[Path, int]) -> None:
        path, _ = agent
        expected = summarise(analyse_plain([path]))
        assert summarise(analyse([path])) == expected
        report, analysis = audit_log(str(path), min_bytes=0)  # two processes, the log cut in two
        assert report.ok and summarise(analysis) == expected
        report, summary = audit_summary(str(path), min_bytes=0)
        assert report.ok and summary == expected

    def test_the_command_json_html_why_and_diff(self, agent: tuple[Path, int], tmp_path: Path) -> None:
        path, _ = agent
        html = tmp_path / "report.html"
        result = runner.invoke(app, ["audit", str(path), "--json", "--html", str(html)])
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert out["summary"]["cost"]["total_samples"] == 5
        page = html.read_text()
        samples = page[page.index('id="samples"') : page.index('id="flow"')]
        bars = dict(re.findall(r"<title>([\d.]+): ([\d.]+)</title>", samples))
        assert bars == {"0": "2", "1": "3", "2": "1"}  # steps by samples used
        assert "5 samples, 570 input and 100 output tokens, $0.0008 in all" in page
        assert out["summary"]["cost"]["total_input_tokens"] == sum(i for i, _ in TOKENS) == 570
        assert out["summary"]["cost"]["total_output_tokens"] == sum(o for _, o in TOKENS) == 100

        run_id = _records(path)[0]["run_id"]
        why = runner.invoke(app, ["audit", str(path), "--why", run_id, "--json"])
        assert why.exit_code == 0, why.output
        events = [e for e in json.loads(why.stdout)["why"]["events"] if e["kind"] == "verdict"]
        assert sum(e["charged"].get("samples", 0) for e in events) == 5
        story = "\n".join(json.loads(why.stdout)["why"]["story"])
        assert "run budget samples 1, calls 1" in story and "this attempt charged" in story
        assert re.search(r"this attempt charged calls 1(;|$)", story, re.MULTILINE)  # a tool call's line

        diff = runner.invoke(app, ["audit", "--diff", str(path), str(path), "--json"])
        assert diff.exit_code == 0, diff.output
        sides = json.loads(diff.stdout)["diff"]
        assert sides["a"]["total_samples"] == 5 and sides["delta"]["total_samples"] == 0
        assert sides["a"]["usd"] == pytest.approx(USD)


@pytest.fixture(scope="module", params=["sync", "async"])
def failover(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, int, int]:
    path = tmp_path_factory.mktemp("failover") / "decisions.jsonl"
    primary, backup = failover_log(path, str(request.param))
    return path, len(primary.seen), len(backup.seen)


class TestDeadPrimaryLog:
    """A dead primary behind the model breaker: its skipped turns are verdicts, not attempts."""

    def test_the_breaker_skips_are_switch_verdicts_that_charged_nothing(
        self, failover: tuple[Path, int, int]
    ) -> None:
        path, primary_calls, backup_calls = failover
        assert (primary_calls, backup_calls) == (2, 5)
        verdicts = [r for r in _records(path) if r["kind"] == "verdict"]
        skips = [r for r in verdicts if r["target"] == "primary" and r["budget"]["charged"] == {}]
        assert len(skips) == 4 and {r["action"] for r in skips} == {"switch"}
        primary = [r for r in verdicts if r["target"] == "primary"]
        assert len(primary) == 6  # six verdicts on the primary, two calls made

    def test_attempts_are_the_calls_made_not_the_verdicts(self, failover: tuple[Path, int, int]) -> None:
        path, primary_calls, backup_calls = failover
        summary = summarise(analyse([path]))
        assert _target(summary, "primary")["attempts"] == primary_calls == 2
        assert _target(summary, "backup")["attempts"] == backup_calls == 5
        per_step = {r["step_id"]: (r["avg_attempts"], r["avg_verdicts"]) for r in summary["per_step"]}
        # The first turn: two calls to the primary (a timeout, retried once) then the backup's.
        assert per_step["model:1"] == (3.0, 3.0)
        # Later turns: one switch away from the open breaker (no call), one call to the backup.
        assert [per_step[f"model:{i}"] for i in range(2, 6)] == [(1.0, 2.0)] * 4
        steps = analyse([path]).steps.values()
        assert sum(s.attempts for s in steps) == primary_calls + backup_calls
        assert summary["cost"]["total_samples"] == primary_calls + backup_calls

    def test_tokens_are_the_scripted_usage_counted_once(self, failover: tuple[Path, int, int]) -> None:
        path, _, _ = failover
        summary = summarise(analyse([path]))
        cost = summary["cost"]
        expected_in, expected_out = sum(i for i, _ in BACKUP_TOKENS), sum(o for _, o in BACKUP_TOKENS)
        assert (cost["total_input_tokens"], cost["total_output_tokens"]) == (expected_in, expected_out)
        backup, primary = _target(summary, "backup"), _target(summary, "primary")
        assert (backup["input_tokens"], backup["output_tokens"]) == (expected_in, expected_out)
        assert (primary["input_tokens"], primary["output_tokens"]) == (0.0, 0.0)  # a failed call used none
        # Each turn is a run with a ledger of its own, whose totals at its last verdict (the accept)
        # hold its call's tokens: together, the same totals.
        lasts = [r["budget"]["used"] for r in _records(path) if r.get("action") == "accept"]
        assert len(lasts) == len(BACKUP_TOKENS)
        assert sum(u["input_tokens"] for u in lasts) == expected_in
        assert sum(u["output_tokens"] for u in lasts) == expected_out

    def test_every_path_of_the_audit_counts_the_same(self, failover: tuple[Path, int, int]) -> None:
        path, _, _ = failover
        expected = summarise(analyse_plain([path]))
        assert summarise(analyse([path])) == expected
        report, analysis = audit_log(str(path), min_bytes=0)
        assert report.ok and summarise(analysis) == expected
        report, summary = audit_summary(str(path), min_bytes=0)
        assert report.ok and summary == expected

    def test_the_text_report_shows_attempts_and_tokens(self, failover: tuple[Path, int, int]) -> None:
        path, _, _ = failover
        result = runner.invoke(app, ["audit", str(path)], terminal_width=200)
        assert result.exit_code == 0, result.output
        assert "7 samples, 1,600 input and 250 output tokens, $0.0021" in result.stdout
        out = result.stdout
        table = out[out.index("Cost by model and tool") : out.index("Unchecked accepts")]
        cells = [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines()]
        rows = {r[0]: r[1:] for r in cells if r}
        assert rows["primary"] == ["model", "2", "2", "0", "0", "0"]  # attempts, samples, tokens, usd
        assert rows["backup"] == ["model", "5", "5", "1,600", "250", "0.0021"]


def _step(log: DecisionLog, run_ledger: Ledger | None = None) -> tuple[Any, list[ScriptedBackend]]:
    small = ScriptedBackend(
        ["The answer is 41", "The answer is 40"], model="small", confidence=0.6, cycle=True
    )
    large = ScriptedBackend(["The answer is 42"], model="large", confidence=0.95, cycle=True)
    step = ControlledStep(
        [small, large],
        policy=Policy(
            stopping="sc-3", min_samples=3, max_samples=3, max_refines=0, low_confidence=("switch",)
        ),
        budget=Budget(samples=6),
        run_ledger=run_ledger,
        log=log,
        step_id="solve",
    )
    return step.compile(), [small, large]


def _drawn(backends: list[ScriptedBackend]) -> int:
    return sum(c.k for b in backends for c in b.calls)


def _tool_graph(log: DecisionLog, ledger: Ledger) -> Any:
    lookup = flaky_tool()
    calls = [{"name": "lookup", "args": {"key": "unit"}, "id": "call-1"}]
    model = FakeMessagesListChatModel(responses=[AIMessage("", tool_calls=calls), AIMessage("done")])
    tools = ControlledToolNode([lookup], run_ledger=ledger, log=log, sleep=no_wait)
    return agent_with_tools(model, tools)


class TestStepAndToolNodeLogs:
    def test_a_controlled_step_counts_its_draws_on_every_question(self, tmp_path: Path) -> None:
        path = tmp_path / "step.jsonl"
        with DecisionLog(path) as log:
            graph, backends = _step(log)
            # Two questions on one thread are one run id and one step id in the log: the step is met
            # twice, each time with a fresh ledger.
            for thread in ("chat", "chat", "other"):
                graph.invoke({"messages": [("user", "6 * 7?")]}, {"configurable": {"thread_id": thread}})
        records = _records(path)
        assert {r["budget"]["scope"] for r in records} == {"step"}
        assert [r["budget"]["used"]["samples"] for r in records] == [3.0, 6.0] * 3
        assert [r["budget"]["charged"]["samples"] for r in records] == [3.0] * 6
        summary = summarise(analyse([path]))
        drawn = _drawn(backends)
        assert drawn == 18  # per question: three from the small model, a switch, three from the large
        assert summary["cost"]["total_samples"] == drawn
        by = {r["target"]: r["samples"] for r in summary["cost"]["by_target"]}
        assert by == {"small": 9.0, "large": 9.0}
        steps = {run: s.samples for (run, _), s in analyse([path]).steps.items()}
        assert steps == {"chat": 12.0, "other": 6.0}
        assert sorted(summary["samples_hist"]) == [[6.0, 1], [12.0, 1]]
        assert summarise(analyse_plain([path])) == summary

    def test_a_tool_node_sharing_the_run_ledger_with_a_step_adds_no_samples(self, tmp_path: Path) -> None:
        path = tmp_path / "mixed.jsonl"
        ledger = Ledger(Budget(attempts=20))
        config: Any = {"configurable": {"thread_id": "mixed"}}
        with DecisionLog(path) as log:
            graph, backends = _step(log, run_ledger=ledger)
            graph.invoke({"messages": [("user", "6 * 7?")]}, config)
            _tool_graph(log, ledger).invoke({"messages": [("user", "look up the unit")]}, config)
        tool_records = [r for r in _records(path) if str(r.get("step_id", "")).startswith("tool:")]
        # The tool node's records carry the shared ledger, whose totals hold the step's samples too.
        assert [r["budget"]["used"]["samples"] for r in tool_records] == [6.0, 6.0]
        assert [r["budget"]["scope"] for r in tool_records] == ["run", "run"]
        summary = summarise(analyse([path]))
        assert summary["cost"]["total_samples"] == _drawn(backends) == 6
        tool = _target(summary, "lookup")
        assert (tool["kind"], tool["samples"], tool["attempts"]) == ("tool", 0.0, 2)
        assert summarise(analyse_plain([path])) == summary
