"""Per-token data from real runs of the embedded model, and the heat map the audit draws from it.

A ``retryctl batch`` of two tasks on the demo agent (the embedded SmolLM2, as ``make demo`` runs it)
writes every candidate's per-token diagnostics under the default ``Policy.token_log``; the gateway's
adaptive requests log them too; ``retryctl audit LOG --html`` draws them, and headless Chromium renders
the map (cells with hover titles, the scale's colours on screen).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from retryctl.audit import verify_log
from retryctl.cli import app
from tests.gateway._support import serving
from tests.models.conftest import needs_llama
from tests.report.test_html import _FLAGS, CHROMIUM, _png_pixels

pytestmark = needs_llama
runner = CliRunner()
TASKS = [
    {"id": "a", "question": "Tom has 3 apples and gets 4 more. How many apples does he have?", "gold": 7},
    {"id": "b", "question": "A box holds 6 eggs. How many eggs are in 2 boxes?", "gold": 12},
]


def _records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]


def _token_samples(log: Path) -> list[dict[str, Any]]:
    return [i for r in _records(log) for i in (r.get("extra") or {}).get("token_samples", [])]


@pytest.fixture(scope="module")
def batch_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real batch of :data:`TASKS` on the embedded model: its decision log and its audit page."""
    tmp = tmp_path_factory.mktemp("batch")
    tasks, log, page = tmp / "tasks.jsonl", tmp / "decisions.jsonl", tmp / "audit.html"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    done = runner.invoke(app, ["batch", str(tasks), "--out", str(tmp / "r.jsonl"), "--log", str(log)])
    assert done.exit_code in (0, 3), done.output  # 3: some task abstained, an honest end
    audit = runner.invoke(app, ["audit", str(log), "--html", str(page)])
    assert audit.exit_code == 0, audit.output
    return log, page


class TestBatchLog:
    def test_every_candidate_carries_its_tokens_with_the_whole_entropy(
        self, batch_run: tuple[Path, Path]
    ) -> None:
        log, _ = batch_run
        assert verify_log(log).ok
        items = _token_samples(log)
        assert items, "no per-token data in a batch log of the embedded model"
        for item in items:
            n = len(item["token_text"])
            assert 0 < n <= 64 and n <= item["tokens_total"]
            assert item["entropy_kind"] == "full"  # the embedded model's whole distribution
            assert len(item["token_logprobs"]) == len(item["token_entropy"]) == len(item["token_top3"]) == n
            assert all(e >= 0 for e in item["token_entropy"]) and all(0 < m <= 1 for m in item["token_top3"])
        # Each verdict that logs tokens logs every candidate it judged.
        for r in _records(log):
            logged = (r.get("extra") or {}).get("token_samples")
            if logged:
                assert len(logged) == r["candidates_summary"]["n"]

    def test_the_audit_page_draws_a_map_per_step_with_the_accepted_marked(
        self, batch_run: tuple[Path, Path]
    ) -> None:
        log, page = batch_run
        html = page.read_text(encoding="utf-8")
        tokens = sum(len(i["token_text"]) for i in _token_samples(log))
        assert html.count('<g class="tok">') == tokens
        assert len(re.findall(r'<section class="tokmap"><h3>[ab]/', html)) == 2  # one per task (step)
        accepted = [i for i in _token_samples(log) if i["accepted"]]
        assert html.count('class="accepted"') == len(accepted)
        assert "No per-token data" not in html and "<script" not in html


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
class TestHeatMapInChromium:
    def _chromium(self, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
        assert CHROMIUM is not None
        cmd = [CHROMIUM, *_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args]
        return subprocess.run(cmd, capture_output=True, timeout=120, check=True)

    def test_the_rendered_dom_has_the_cells_and_their_titles(
        self, batch_run: tuple[Path, Path], tmp_path: Path
    ) -> None:
        _, page = batch_run
        dom = self._chromium(tmp_path, "--dump-dom", page.as_uri()).stdout.decode()
        cells = re.findall(
            r'<g class="tok"><title>token \d+ [^<]*entropy [\d.]+ nats, full[^<]*</title>', dom
        )
        assert len(cells) == dom.count('<g class="tok">') > 0

    def test_the_map_is_on_screen_in_its_colours(self, batch_run: tuple[Path, Path], tmp_path: Path) -> None:
        _, page = batch_run
        # Only the heat-map panel, so that the screenshot is of it.
        html = page.read_text(encoding="utf-8")
        head = html[: html.index("<body>") + 6]
        start = html.index('<section class="panel" id="tokens">')
        panel = html[start : html.index("</section>", html.rindex('<section class="tokmap">')) + 10]
        only = tmp_path / "tokens.html"
        only.write_text(head + panel + "</body></html>", encoding="utf-8")
        shot = tmp_path / "shot.png"
        self._chromium(tmp_path, f"--screenshot={shot}", "--window-size=1300,900", only.as_uri())
        width, channels, rows = _png_pixels(shot)
        # The scale's lightest stop (#fcfdbf, calm tokens) fills many cells of any real run.
        light = sum(
            1
            for row in rows
            for x in range(0, width * channels, channels)
            if abs(row[x] - 0xFC) < 6 and abs(row[x + 1] - 0xFD) < 6 and abs(row[x + 2] - 0xBF) < 6
        )
        warm = sum(
            1
            for row in rows[::2]
            for x in range(0, width * channels, channels * 2)
            if row[x] > 0xC0 and row[x + 1] < 0xA0 and row[x + 2] < 0xB0  # the scale's orange-to-red
        )
        assert light > 2000 and warm > 100


@pytest.fixture(scope="module")
def gateway_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    log = tmp_path_factory.mktemp("gateway") / "decisions.jsonl"
    with serving("--embedded", "--calibration", "none", log=log) as (url, _):
        body = {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "What is 2 + 3? Answer with the number only."}],
            "max_tokens": 6,
            "seed": 3,
            "adaptive": True,
            "retryctl": {"max_samples": 3},
        }
        done = httpx.post(url + "/chat/completions", json=body, timeout=300)
        assert done.status_code == 200, done.text
    yield log


class TestGatewayLog:
    def test_an_adaptive_requests_verdicts_carry_the_tokens_and_the_audit_draws_them(
        self, gateway_log: Path, tmp_path: Path
    ) -> None:
        items = _token_samples(gateway_log)
        assert items and all(i["entropy_kind"] == "full" for i in items)
        assert all(len(i["token_text"]) == len(i["token_entropy"]) > 0 for i in items)
        page = tmp_path / "gateway.html"
        assert runner.invoke(app, ["audit", str(gateway_log), "--html", str(page)]).exit_code == 0
        html = page.read_text(encoding="utf-8")
        assert html.count('<g class="tok">') == sum(len(i["token_text"]) for i in items)
