"""A screenshot of a retryctl run in Arize Phoenix's UI (docs/img/phoenix-trace.png).

    PYTHONPATH=. .venv/bin/python bench/phoenix_screenshot.py [--out docs/img/phoenix-trace.png] [--keep]

Starts ``phoenix serve`` on 127.0.0.1 (tests/_phoenix.py: free ports, a temporary database, its own
telemetry and external resources off), runs the Phoenix test's scenario (tests/telemetry/phoenix:
a ``create_agent`` agent under ``RetryController`` whose tool is down, retried then switched; a run
stopped by its budget; an adaptive gateway request joining a caller's trace), exports its spans over
OTLP/HTTP, then opens the switched run's trace page in headless Chromium, the switch attempt
selected, and saves the window (about 110 KB at 1440x1000). Prints the Phoenix start time, the trace
URL and the PNG's size. Needs the dev extra and ``chromium``.
``--keep`` leaves Phoenix running until Enter is pressed, to look at the UI by hand.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the scenario and the harness live with the tests

from retryctl.telemetry import names  # noqa: E402
from tests._phoenix import Phoenix, phoenix_command  # noqa: E402
from tests.telemetry.phoenix._scenario import APP_SPAN, provider_to, run_all  # noqa: E402

PROJECT = "retryctl-demo"


def _get(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        loaded: dict[str, object] = json.load(answer)
        return loaded


def trace_url(phoenix: Phoenix) -> str:
    """The UI page of the first agent run's trace (the tool retried, then switched), its switch
    attempt selected."""
    spans = phoenix.wait_for_spans(PROJECT, 21)  # the project exists from its first span on
    projects = _get(f"{phoenix.url}/v1/projects")["data"]
    assert isinstance(projects, list)
    project_id = next(p["id"] for p in projects if p["name"] == PROJECT)
    first = min((s for s in spans if s["name"] == APP_SPAN), key=lambda s: s["start_time"])
    trace = first["context"]["trace_id"]
    # The attempt whose verdict switched the tool, selected: its attributes show in the side panel.
    switched = next(
        s
        for s in spans
        if s["context"]["trace_id"] == trace
        and any(e["attributes"].get(names.EVALUATION_SCORE_LABEL) == "switch" for e in s["events"])
    )
    return f"{phoenix.url}/projects/{project_id}/traces/{trace}?selectedSpanNodeId={switched['id']}"


def shoot(url: str, out: Path, size: str) -> None:
    """Save ``url`` as rendered by headless Chromium (the UI is a JS app: give it virtual time)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",  # root in a container has no user namespace for Chromium's sandbox
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=15000",
                f"--window-size={size}",
                f"--screenshot={out}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "phoenix-trace.png")
    parser.add_argument("--size", default="1440,1000", help="the browser window, WIDTH,HEIGHT")
    parser.add_argument("--keep", action="store_true", help="leave Phoenix up until Enter")
    args = parser.parse_args()
    command = phoenix_command()
    if command is None:
        raise SystemExit("arize-phoenix is not installed (pip install -e '.[dev]')")
    with tempfile.TemporaryDirectory() as work:
        phoenix = Phoenix(Path(work) / "phoenix", command)
        phoenix.start()
        try:
            print(f"phoenix serve healthy after {phoenix.started_in_s:.1f} s at {phoenix.url}")
            provider = provider_to(phoenix.traces_endpoint, PROJECT)
            run_all(provider, Path(work), [])
            provider.shutdown()
            url = trace_url(phoenix)
            print(f"trace page: {url}")
            began = time.monotonic()
            shoot(url, args.out, args.size)
            print(f"{args.out}: {args.out.stat().st_size / 1024:.0f} KB in {time.monotonic() - began:.1f} s")
            if args.keep:
                input("Phoenix is up; press Enter to stop it. ")
        finally:
            phoenix.stop()


if __name__ == "__main__":
    main()
