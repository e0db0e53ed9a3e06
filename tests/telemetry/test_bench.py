"""bench/telemetry_overhead.py in its ``--quick`` mode: it runs, prints the three subjects of both views
and the API's target, and its SDK subject really traced. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class TestTelemetryOverhead:
    def test_quick_run_prints_every_subject_and_traces_under_the_sdk(self) -> None:
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "telemetry_overhead.py"), "--quick", "--json"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
        *lines, last = done.stdout.strip().splitlines()
        text = "\n".join(lines)
        for label in ("otel not installed", "API, no provider set", "SDK, BatchSpanProcessor"):
            assert text.count(label) == 2, text  # the decision view and the graph-step view
        assert "API with no provider over off:" in text
        data = json.loads(last)
        assert set(data["decision"]["ms"]) == {"off", "api", "sdk"}
        assert isinstance(data["api_target_met"], bool)
        # Every decision of the sdk subject made its spans (two per tool call: the call and its attempt).
        assert data["sdk_spans_exported"] > 0
        assert data["sdk_spans_exported"] % 2 == 0
