"""The one-pass analysis, the audit sections, --why stories and --diff figures, on real logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from retryctl.report import (
    analyse,
    diff_sides,
    reason_shape,
    run_story,
    side_figures,
    story_lines,
    summarise,
)
from tests.report._logs import QUESTIONS, graph_log, tool_log, verdict, write_verdicts


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return graph_log(tmp_path_factory.mktemp("logs") / "decisions.jsonl", token_logprobs=True)


class TestAnalyse:
    def test_counts_runs_steps_and_record_kinds(self, real_log: Path) -> None:
        a = analyse([real_log])
        assert a.runs == {q[0] for q in QUESTIONS}
        assert a.summary_records == len(QUESTIONS)
        assert a.verdict_records == sum(a.actions.values())
        assert a.records == a.verdict_records + a.summary_records

    def test_step_outcomes_follow_the_scripts(self, real_log: Path) -> None:
        steps = {run: s for (run, _), s in analyse([real_log]).steps.items()}
        # Unanimous small model: accepted at once, 3 samples.
        assert steps["run-easy"].actions == ["accept"] and steps["run-easy"].samples == 3
        # Small disagrees, large agrees: switch then accept, 6 samples over 2 attempts.
        assert steps["run-switch"].actions == ["switch", "accept"]
        assert steps["run-switch"].samples == 6 and steps["run-switch"].attempts == 2
        # Both disagree: nothing left to try.
        assert steps["run-stuck"].actions == ["switch", "stop"]
        assert steps["run-stuck"].at_max_budget  # 6 samples of a 6-sample budget

    def test_accuracy_uses_the_summary_gold(self, real_log: Path) -> None:
        steps = {run: s for (run, _), s in analyse([real_log]).steps.items()}
        expected = {"run-easy": True, "run-switch": True, "run-wrong": False, "run-stuck": False}
        assert {run: s.correct for run, s in steps.items()} == expected

    def test_samples_are_charged_to_the_model_that_drew_them(self, real_log: Path) -> None:
        a = analyse([real_log])
        # Every question samples the small model 3 times; run-switch and run-stuck also the large one.
        assert a.target_samples["small"] == 3 * len(QUESTIONS)
        assert a.target_samples["large"] == 6

    def test_verdict_flow_starts_each_step(self, real_log: Path) -> None:
        a = analyse([real_log])
        assert sum(n for (src, _), n in a.transitions.items() if src == "start") == len(QUESTIONS)
        assert a.transitions[("switch", "accept")] == 1 and a.transitions[("switch", "stop")] == 1

    def test_token_logprobs_become_surprisal_rows(self, real_log: Path) -> None:
        rows = [r for r in analyse([real_log]).token_rows if r.label.startswith("sample")]
        assert rows and {r.kind for r in rows} == {"surprisal"}
        assert rows[0].values == pytest.approx([0.1, 0.7, 2.3])
        assert rows[0].group.startswith(QUESTIONS[0][0] + "/")  # one heat-map section per step

    def test_undecodable_lines_are_skipped_and_named(self, tmp_path: Path, real_log: Path) -> None:
        damaged = tmp_path / "damaged.jsonl"
        damaged.write_bytes(real_log.read_bytes() + b'{"torn": ')
        a = analyse([damaged])
        assert a.undecodable_lines == [f"{damaged}:{len(real_log.read_bytes().splitlines()) + 1}"]
        assert a.records == len(real_log.read_bytes().splitlines())


class TestSummarise:
    def test_threshold_hint_counts_steps_just_under_the_threshold(self, tmp_path: Path) -> None:
        rows = [(f"r{i}", "q", verdict("stop", 0.87), None) for i in range(4)]
        rows += [("r9", "q", verdict("stop", 0.82), None), ("r10", "q", verdict("accept", 0.95), None)]
        s = summarise(analyse([write_verdicts(tmp_path / "log.jsonl", rows)]))
        hints = {(h["low"], h["high"]): h for h in s["threshold_hints"]}
        assert hints[(0.85, 0.9)]["steps"] == 4
        assert hints[(0.8, 0.85)]["steps"] == 1
        assert s["threshold_hints"][0]["text"].startswith(
            "4 steps stalled at confidence 0.85–0.90 under a 0.90"
        )

    def test_black_holes_are_big_spenders_that_still_stopped(self, tmp_path: Path) -> None:
        rows = [(f"r{i}", "q", verdict("accept", 0.95, samples=3), None) for i in range(18)]
        rows += [
            ("big", "q", verdict("stop", 0.4, samples=40), None),
            ("ok", "q", verdict("accept", 0.95, samples=40), None),
        ]
        s = summarise(analyse([write_verdicts(tmp_path / "log.jsonl", rows)]))
        bh = s["black_holes"]
        assert [t["run_id"] for t in bh["top"]] == ["big"]
        assert bh["share"] == pytest.approx(40 / (18 * 3 + 80))

    def test_stop_reasons_group_like_reasons(self, tmp_path: Path) -> None:
        rows = [
            ("a", "q", verdict("stop", None, reason="step 'q' budget 'samples' is spent (8 of 8)"), None),
            ("b", "r", verdict("stop", None, reason="step 'r' budget 'samples' is spent (10 of 10)"), None),
            ("c", "q", verdict("stop", None, reason="breaker of 'gpt' is open; nothing left to try"), None),
        ]
        s = summarise(analyse([write_verdicts(tmp_path / "log.jsonl", rows)]))
        assert [(r["budget"], r["steps"]) for r in s["stop_reasons"]] == [("samples", 2), (None, 1)]

    def test_cost_by_target_separates_tools(self, real_log: Path) -> None:
        s = summarise(analyse([real_log]))
        assert {r["target"]: r["kind"] for r in s["cost"]["by_target"]} == {
            "small": "model",
            "large": "model",
        }
        assert s["cost"]["total_samples"] == 3 + 6 + 3 + 6

    def test_no_accuracy_without_gold(self, tmp_path: Path) -> None:
        s = summarise(
            analyse([write_verdicts(tmp_path / "l.jsonl", [("r", "q", verdict("accept", 0.9), None)])])
        )
        assert s["accuracy"] is None


class TestReasonShape:
    def test_blanks_numbers_and_quoted_names_but_keeps_the_budget(self) -> None:
        assert (
            reason_shape("step 'q1' budget 'usd' is spent (0.5 of 0.5)")
            == "step '…' budget 'usd' is spent (# of #)"
        )
        assert reason_shape("breaker of 'gpt' is open; nothing left to try") == (
            "breaker of '…' is open; nothing left to try"
        )


class TestRunStory:
    def test_tells_each_verdict_in_order_then_the_summary(self, real_log: Path) -> None:
        events = run_story([real_log], "run-switch")
        assert [e.get("action", e["kind"]) for e in events] == ["switch", "accept", "summary"]
        lines = story_lines(events)
        assert "SWITCH" in lines[0] and "on small" in lines[0] and "switching to 'large'" in lines[0]
        assert any("ACCEPT" in line and "on large" in line for line in lines)
        assert lines[-1].startswith("3. step solve ended after 2 attempts with answer '42'")

    def test_unknown_run_has_no_story(self, real_log: Path) -> None:
        assert run_story([real_log], "nope") == []


class TestDiff:
    def test_two_runs_and_their_difference(self, real_log: Path) -> None:
        a = analyse([real_log])
        d = diff_sides(
            "run-easy", side_figures(a, run_id="run-easy"), "run-stuck", side_figures(a, run_id="run-stuck")
        )
        assert d["a"]["avg_samples"] == 3 and d["b"]["avg_samples"] == 6
        assert d["delta"]["avg_samples"] == 3
        assert d["delta"]["verdicts"] == {"accept": -1, "stop": 1, "switch": 1}
        assert d["a"]["accuracy"] == 1.0 and d["b"]["accuracy"] == 0.0


class TestToolLog:
    def test_tool_calls_are_steps_and_their_targets_are_tools(self, tmp_path: Path) -> None:
        log = tool_log(tmp_path / "tools.jsonl")
        s = summarise(analyse([log]))
        assert {r["target"]: r["kind"] for r in s["cost"]["by_target"]} == {
            "calculator": "tool",
            "local_calculator": "tool",
        }
        assert s["verdicts"] == {"switch": 1, "accept": 1}
        lines = story_lines(run_story([log], "tool-run"))
        assert "breaker of 'calculator' is open" in lines[0] and "breakers calculator open" in lines[1]
