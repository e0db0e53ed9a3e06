"""The HTML report: its panels, and that they render in headless Chromium."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from retryctl.audit import verify_log
from retryctl.report import analyse, render_html, summarise
from tests.report._logs import graph_log, verdict, write_verdicts
from tests.report._reports import eval_page, sweep_page

_spec = importlib.util.spec_from_file_location(
    "_bench_png", Path(__file__).resolve().parents[2] / "bench" / "_png.py"
)
assert _spec is not None and _spec.loader is not None
_PNG = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_PNG)

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _report(log: Path, out: Path) -> Path:
    a = analyse([log])
    out.write_text(render_html(a, summarise(a), [verify_log(log)]), encoding="utf-8")
    return out


def _png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """The rows of pixels of a screenshot, read by ``bench/_png.py`` (the screenshot script's reader)."""
    width, channels, _, rows = _PNG.decode(path.read_bytes())
    return width, channels, [bytes(row) for row in rows]


class TestRenderHtml:
    def test_all_panels_present_with_gold_and_token_data(self, tmp_path: Path) -> None:
        html = _report(
            graph_log(tmp_path / "log.jsonl", token_logprobs=True), tmp_path / "r.html"
        ).read_text()
        for panel in (
            "verification",
            "confidence",
            "samples",
            "flow",
            "accuracy",
            "reliability",
            "tokens",
            "hints",
            "black_holes",
        ):
            assert f'id="{panel}"' in html
        assert html.count('<svg class="chart"') == 5  # the heat map is drawn apart (report/_heatmap.py)
        # The summaries' 3 questions × 3 samples × 3 tokens, and the verdicts' own (Policy.token_log).
        assert html.count('<g class="tok">') > 3 * 3 * 3
        assert 'class="accepted"' in html
        assert "<script" not in html and "http://" not in html.replace(
            'xmlns="http://www.w3.org/2000/svg"', ""
        )

    def test_panels_needing_data_say_so_when_it_is_missing(self, tmp_path: Path) -> None:
        log = write_verdicts(tmp_path / "log.jsonl", [("r", "q", verdict("accept", 0.9), "m")])
        html = _report(log, tmp_path / "r.html").read_text()
        assert 'id="accuracy"' not in html and 'id="reliability"' not in html  # no gold answers
        assert "No per-token data in these logs" in html
        assert html.count('<svg class="chart"') == 3


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
class TestHtmlInChromium:
    def _chromium(self, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
        assert CHROMIUM is not None
        cmd = [CHROMIUM, *_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args]
        return subprocess.run(cmd, capture_output=True, timeout=120, check=True)

    def test_dumped_dom_has_every_plot_with_marks(self, tmp_path: Path) -> None:
        page = _report(graph_log(tmp_path / "log.jsonl", token_logprobs=True), tmp_path / "r.html")
        dom = self._chromium(tmp_path, "--dump-dom", page.as_uri()).stdout.decode()
        charts = re.findall(r'<svg class="chart".*?</svg>', dom, flags=re.S)
        assert len(charts) == 5
        assert '<svg class="tokens"' in dom
        labels = [re.search(r'aria-label="([^"]+)"', c).group(1) for c in charts]  # type: ignore[union-attr]
        assert labels[0].startswith("The confidence each verdict was decided on")
        assert labels[3].startswith("Ungated accuracy against cost")
        assert labels[4].startswith("Reliability of accepted steps")
        assert all(re.search(r"<(rect|circle) class=\"(bar|cell|point)\"", c) for c in charts)

    def test_screenshot_is_not_blank(self, tmp_path: Path) -> None:
        page = _report(graph_log(tmp_path / "log.jsonl"), tmp_path / "r.html")
        shot = tmp_path / "shot.png"
        self._chromium(tmp_path, f"--screenshot={shot}", "--window-size=900,1400", page.as_uri())
        width, channels, rows = _png_pixels(shot)
        # The bars are drawn in #3b6fb6: find that blue (within antialiasing) in the rendered pixels.
        blue = sum(
            1
            for row in rows
            for x in range(0, width * channels, channels)
            if abs(row[x] - 0x3B) < 8 and abs(row[x + 1] - 0x6F) < 8 and abs(row[x + 2] - 0xB6) < 8
        )
        distinct = {row[x : x + 3] for row in rows[::20] for x in range(0, width * channels, channels * 20)}
        assert blue > 500
        assert len(distinct) > 5

    def _count(self, path: Path, rgb: tuple[int, int, int]) -> tuple[int, int]:
        """Pixels of ``rgb`` (within antialiasing), and distinct colours on a coarse grid."""
        width, channels, rows = _png_pixels(path)
        hits = sum(
            1
            for row in rows
            for x in range(0, width * channels, channels)
            if all(abs(row[x + k] - rgb[k]) < 8 for k in range(3))
        )
        distinct = {row[x : x + 3] for row in rows[::20] for x in range(0, width * channels, channels * 20)}
        return hits, len(distinct)

    @pytest.mark.parametrize(("name", "build", "count"), [("eval", eval_page, 2), ("sweep", sweep_page, 4)])
    def test_eval_and_sweep_pages_render_every_chart_with_its_marks(
        self, tmp_path: Path, name: str, build: Any, count: int
    ) -> None:
        page = build(tmp_path)
        dom = self._chromium(tmp_path, "--dump-dom", page.as_uri()).stdout.decode()
        charts = re.findall(r'<svg class="chart".*?</svg>', dom, flags=re.S)
        assert len(charts) == count, name
        for chart in charts:
            assert re.search(r'<polyline class="series"', chart) and re.search(r'class="mark"', chart)
            assert re.search(r'class="tick x"', chart) and re.search(r'class="tick y"', chart)
        shot = tmp_path / "shot.png"
        self._chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri())
        # The first series is drawn in #0072b2: its lines and markers must be on the screen.
        blue, distinct = self._count(shot, (0x00, 0x72, 0xB2))
        assert blue > 400, name
        assert distinct > 5, name
