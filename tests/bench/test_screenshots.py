"""``bench/screenshots.py``'s page for the heat-map picture: it starts at the first step with an
accepted candidate, so that the picture (cut at a fixed height) shows the ✓ its caption describes."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from retryctl.report._heatmap import token_map_html
from retryctl.report._model import TokenRow

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def screenshots() -> Iterator[ModuleType]:
    """``bench/screenshots.py`` imported with bench/ on the path (it imports ``_cli`` from there)."""
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("_bench_screenshots", BENCH / "screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def _row(group: str, accepted: bool) -> TokenRow:
    return TokenRow(label="attempt 1", values=[0.5, 1.5], kind="entropy", group=group, accepted=accepted)


def test_the_heat_map_picture_starts_at_the_first_accepted_step(screenshots: ModuleType) -> None:
    rows = [_row("run-a/solve", False), _row("run-b/solve", False), _row("run-b/solve", True)]
    rows += [_row("run-c/solve", False)]
    html = f'<html><head></head><body><section class="panel" id="tokens">{token_map_html(rows)}</section>'
    shown = screenshots.first_accepted(html)
    assert re.findall(r"<h3>([^<]+) <small>", shown) == ["run-b/solve", "run-c/solve"]
    assert 'class="accepted"' in shown
    assert screenshots.first_accepted(html.replace('class="accepted"', "")) == html.replace(
        'class="accepted"', ""
    )
