"""The benchmark scripts of ``make bench``: each new one runs in its tiny ``--quick`` mode and prints the
figures it promises; the harness turns their JSON into rows and a failing script into a row saying so.

Real processes and a real HTTP server on 127.0.0.1; no timing is asserted (the figures of a quick run
are too small to mean anything). Runtime: about 25 s.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _script(name: str, *args: str, timeout: float = 300) -> tuple[list[str], dict[str, Any]]:
    """Run ``bench/<name>``; return its human lines and the JSON object on its last line."""
    done = subprocess.run(
        [sys.executable, str(BENCH / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    data = json.loads(lines[-1])
    assert isinstance(data, dict)
    return lines[:-1], data


@pytest.fixture(scope="module")
def harness() -> Iterator[ModuleType]:
    """``bench/harness.py`` imported (bench/ is scripts, not a package); its dataclasses need it in
    ``sys.modules`` while it loads."""
    spec = importlib.util.spec_from_file_location("_bench_harness", BENCH / "harness.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


class TestControllerOverhead:
    def test_quick_run_prints_both_graphs_the_ratio_and_the_overhead_per_decision(self) -> None:
        lines, data = _script("controller_overhead.py", "--quick", "--json")
        text = "\n".join(lines)
        for label in (
            "plain ToolNode:",
            "ControlledToolNode:",
            "without a DecisionLog:",
            "ratio controlled/plain:",
            "overhead per decision:",
        ):
            assert label in text, text
        assert "load average" in text
        assert data["plain_step_ms"] > 0 and data["controlled_step_ms"] > 0
        assert data["ratio"] == pytest.approx(data["controlled_step_ms"] / data["plain_step_ms"])
        # Every controlled step wrote exactly one verdict to the real decision log, and the chain verifies.
        assert data["decisions_per_step"] == 1.0
        assert isinstance(data["ratio_met"], bool) and isinstance(data["per_decision_met"], bool)


class TestBatchThroughput:
    def test_quick_run_reports_each_concurrency_against_the_ideal(self) -> None:
        lines, data = _script("batch_throughput.py", "--quick", "--json")
        levels = {row["concurrency"]: row for row in data["levels"]}
        assert sorted(levels) == [1, 8, 64]
        for c, row in levels.items():
            assert f"concurrency {c:>3}:" in "\n".join(lines)
            assert row["tasks"] == c * 2
            assert row["statuses"] == {"accepted": row["tasks"]}  # every task answered by the server
            assert row["calls_per_task"] >= 1.0  # counted by the server, not assumed
            assert row["ideal_s"] == pytest.approx(
                row["tasks"] * data["latency_s"] * row["calls_per_task"] / c
            )
            assert 0 < row["fraction"] == pytest.approx(row["ideal_s"] / row["elapsed_s"])
            assert row["max_in_flight"] <= c
        assert levels[64]["max_in_flight"] > 8  # the runner really overlapped its requests
        assert isinstance(data["target_met"], bool)


class TestGatewayThroughput:
    def test_quick_run_compares_the_gateway_with_the_upstream_and_counts_adaptive_samples(
        self, harness: ModuleType
    ) -> None:
        lines, data = _script("gateway_throughput.py", "--quick", "--json")
        text = "\n".join(lines)
        levels = {level["concurrency"]: level for level in data["levels"]}
        assert sorted(levels) == [1, 16, 64]
        for c, level in levels.items():
            assert f"concurrency {c:>3}: direct" in text
            for side in ("direct", "gateway"):
                assert level[side]["requests"] == c * 2  # one round of two requests per connection
                assert level[side]["failures"] == 0  # every request answered 200, through the gateway too
                assert level[side]["p90_ms"] >= level[side]["p50_ms"] > 0
            assert level["ratio"] == pytest.approx(level["gateway"]["rps"] / level["direct"]["rps"])
            assert level["added_p50_ms"] == pytest.approx(
                level["gateway"]["p50_ms"] - level["direct"]["p50_ms"]
            )
        a = data["adaptive"]
        assert a["requests"] == 16 and a["failures"] == 0 and a["accepted"] == 16
        # Samples per request as the responses report them, and as the upstream counted them.
        assert 1 <= a["samples_min"] <= a["samples_per_request"] <= a["samples_max"] <= a["max_samples"]
        assert a["samples_per_request"] == pytest.approx(a["upstream_choices_per_request"])
        assert a["fraction_of_sc"] == pytest.approx(a["samples_per_request"] / a["max_samples"])
        assert a["verdicts_per_request"] >= 1 and a["summaries_per_request"] == 1  # every one was logged
        assert f"vs direct SC-{a['max_samples']}" in text
        assert isinstance(data["ratio_met"], bool) and isinstance(data["added_p50_met"], bool)
        # The harness's rows: the throughput target judged at concurrency 64 only, the added p50 at each.
        rows = harness._gateway(data)
        judged = {r["figure"]: r for r in rows if r["target"] != "—"}
        top = judged["gateway, 20 ms upstream, concurrency 64: throughput of direct"]
        assert top["target"] == ">= 95 %" and top["met"] is (levels[64]["ratio"] >= 0.95)
        assert sum(r["target"] == "<= 2 ms" for r in rows) == 3
        assert rows[-2]["figure"] == f"gateway adaptive (max_samples {a['max_samples']}): samples per request"


class TestHarness:
    def test_runs_each_script_in_its_own_process_and_prints_one_table(self) -> None:
        done = subprocess.run(
            [sys.executable, str(BENCH / "harness.py"), "--quick", "--only", "decide_overhead"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
        for header in ("figure", "value", "target", "met?", "load"):
            assert header in done.stdout
        assert "one decide() call, median" in done.stdout and "<= 500 µs" in done.stdout

    def test_json_rows_carry_figure_value_target_met_and_load(self) -> None:
        _, data = _script("harness.py", "--quick", "--only", "decide_overhead", "--json")
        [row] = data["rows"]
        assert row["bench"] == "decide_overhead" and row["met"] is True
        assert set(row) >= {"figure", "value", "target", "met", "load_1m"}
        assert data["runs"][0]["status"] == "ok" and "median_us" in data["runs"][0]["result"]

    def test_a_failing_script_becomes_a_row_and_the_others_still_count(
        self, harness: ModuleType, tmp_path: Path
    ) -> None:
        broken = tmp_path / "broken.py"
        broken.write_text("import sys\nprint('half a figure')\nsys.exit('no server here')\n")
        silent = tmp_path / "silent.py"
        silent.write_text("print('a figure, but no JSON')\n")
        for script, why in ((broken, "exit 1: no server here"), (silent, "no JSON on its last line")):
            bench = harness.Bench(script.stem, str(script), [], [], lambda _d: [], 60)
            rows, record = harness.run_one(bench, quick=False, verbose=False)
            assert record["status"] == "failed"
            [row] = rows
            assert row["error"] is True and row["met"] is None and why in row["value"]

    def test_unknown_names_are_refused(self) -> None:
        done = subprocess.run(
            [sys.executable, str(BENCH / "harness.py"), "--only", "nope"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=ROOT,
        )
        assert done.returncode == 2 and "unknown benchmark(s) nope" in done.stderr

    def test_last_json_reads_only_a_final_object(self, harness: ModuleType) -> None:
        assert harness.last_json('table\n{"a": 1}\n') == {"a": 1}
        assert harness.last_json('{"a": 1}\ntrailing text\n') is None
        assert harness.last_json("[1, 2]\n") is None
        assert harness.last_json("") is None
