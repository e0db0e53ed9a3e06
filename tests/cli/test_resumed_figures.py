"""A batch interrupted with Ctrl-C mid-step and resumed (issue 29, items 4 and 5): the interrupted try's
verdicts stay in the decision log, and the task runs again under the same run id. The audit counts the
task once, with the samples of every try (they were spent), and tells the tries apart in ``--why``;
the batch's ``avg_samples`` is the samples of the try that gave each result, a figure of another name
in the tables ("average samples (finishing try)" against the audit's "(all tries)")."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from retryctl.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_mid_step_then_resume_counts_the_task_once_with_every_try(tmp_path: Path) -> None:
    tasks, out, log = tmp_path / "t.jsonl", tmp_path / "r.jsonl", tmp_path / "d.jsonl"
    rows = [{"id": "a", "question": "add 1 2", "gold": "3"}, {"id": "s", "question": "stall 1"}]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    graph = ["--graph", "tests.batch._graphs:build", "--concurrency", "1"]
    cmd = [sys.executable, "-m", "retryctl.cli", "batch", str(tasks), "--out", str(out), "--log", str(log)]
    env = {**os.environ, "RETRYCTL_TEST_HANG": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*cmd, *graph], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # until the second task blocks in its second attempt
        if line.startswith("HANG"):
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    again = shlex.split(err.strip().splitlines()[-1].split("; to continue: ", 1)[1])
    env.pop("RETRYCTL_TEST_HANG")
    done = subprocess.run(
        [sys.executable, "-m", "retryctl.cli", *again[1:], "--json"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    batch = json.loads(done.stdout)
    results = {json.loads(x)["id"]: json.loads(x) for x in out.read_text().splitlines()}
    finishing = {k: r["usage"]["samples"] for k, r in results.items()}
    assert finishing == {"a": 3, "s": 6}  # s's second try: two attempts of three samples, then stop
    assert batch["avg_samples_finishing_try"] == 4.5

    audit = runner.invoke(app, ["audit", str(log), "--json"])
    assert audit.exit_code == 0, audit.output
    summary = json.loads(audit.stdout)["summary"]
    (solve,) = summary["per_step"]
    # Each task once (two steps, not three), with what every try spent: s's first try drew 3 samples.
    assert solve["runs"] == 2 and solve["avg_samples"] == (3 + 3 + 6) / 2
    assert summary["cost"]["total_samples"] == 12

    why = runner.invoke(app, ["audit", str(log), "--why", "s"]).stdout
    assert "try 2 begins: the try before it ended after 1 attempt without a summary" in why
    assert why.count("try 2 begins") == 1 and "try 3" not in why

    shown = runner.invoke(app, ["batch", str(tasks), "--out", str(out), "--resume", "--graph",
                                "tests.batch._graphs:build"]).stdout  # fmt: skip
    assert "average samples (finishing try)" in shown and "4.50" in shown


def test_the_summary_of_a_step_tried_twice_says_so() -> None:
    from retryctl.report._story import story_lines

    def verdict(attempt: int) -> dict[str, Any]:
        return {
            "kind": "verdict", "step_id": "q", "attempt": attempt, "target": "m", "action": "refine",
            "reason": "low", "confidence": 0.5, "answer": None, "signals": {}, "used": {}, "limit": {},
            "breaker": {}, "error_class": None, "notes": [],
        }  # fmt: skip

    summary = {"kind": "summary", "step_id": "q", "final_answer": "34", "budget_used": {}, "budget_max": {}}
    lines = story_lines([verdict(1), verdict(2), verdict(3), verdict(1), verdict(2), summary])
    assert lines[-1].startswith(
        "6. step q ended after 2 attempts of its try 2 (1 earlier, interrupted: 3 attempts)"
    )
    assert sum("try 2 begins" in line for line in lines) == 1
    once = story_lines([verdict(1), verdict(2), summary])
    assert once[-1].startswith("3. step q ended after 2 attempts with answer '34'")
