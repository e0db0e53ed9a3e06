"""``bench/model_failover.py`` runs and prints the figures it promises (waits recorded, not slept: no
timing is asserted). Runtime: a few seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_failover_benchmark_counts_calls_and_waits() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "model_failover.py"), "--no-wait", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout.strip().splitlines()[-1])
    rows = {(r["scenario"], r["agent"]): r for r in data["rows"]}
    assert data["turns"] == 5 and len(rows) == 14
    for scenario in ("scripted 503 (transient)", "scripted 401 (terminal)", "ChatOpenAI, server 503"):
        ours = rows[(scenario, "retryctl RetryController")]
        assert ours["primary_calls"] == 2  # then skipped by its breaker
        assert rows[(scenario, "LangChain fallback only")]["primary_calls"] >= 5  # every turn
    # Without the breaker every turn retries the dead primary: the 20 calls.
    assert rows[("scripted 503 (transient)", "retryctl, model_breaker=None")]["primary_calls"] == 20
    # ChatOpenAI's own two retries stack under LangChain's middlewares, not under the controller.
    assert rows[("ChatOpenAI, server 503", "LangChain fallback only")]["primary_calls"] == 15
