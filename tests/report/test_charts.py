"""The charts of the ``audit``, ``eval`` and ``sweep`` reports, read back from their SVG: every label
legible (WCAG 2.x AA contrast on what it sits on), ticks with values on both axes, the reliability
diagonal, series that coincide told apart, each system's operating point, the sweep's legend and table.
"""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from retryctl.cli._eval import _table as _eval_table
from retryctl.cli._sweep import _sweep_table
from retryctl.evals._report import render_html
from retryctl.record._sweep_page import SWEEP_COLUMNS, render_sweep_html
from retryctl.report._html import _count
from retryctl.report._svg import heat_map, scatter
from tests.report._reports import audit_page, eval_page, eval_report, sweep_page, sweep_rows

PAGES: dict[str, Callable[[Path], Path]] = {"audit": audit_page, "eval": eval_page, "sweep": sweep_page}
AA = 4.5
"""WCAG 2.x level AA for normal text."""


def _linear(channel: int) -> float:
    """WCAG 2.x: an sRGB channel (0-255) linearised."""
    c = channel / 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _rgb(colour: str) -> tuple[int, int, int]:
    colour = colour.strip().lower()
    named = {"white": "#ffffff", "black": "#000000"}
    colour = named.get(colour, colour)
    if m := re.fullmatch(r"rgb\((\d+),\s*(\d+),\s*(\d+)\)", colour):
        r, g, b = (int(v) for v in m.groups())
        return r, g, b
    assert re.fullmatch(r"#[0-9a-f]{3}|#[0-9a-f]{6}", colour), colour
    if len(colour) == 4:
        colour = "#" + "".join(ch * 2 for ch in colour[1:])
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def luminance(colour: str) -> float:
    """Relative luminance, WCAG 2.x: 0.2126 R + 0.7152 G + 0.0722 B of the linearised channels."""
    r, g, b = (_linear(c) for c in _rgb(colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """(L1 + 0.05) / (L2 + 0.05), the lighter over the darker."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def charts(html: str) -> list[ET.Element]:
    """Every ``<svg class="chart">`` of a page, parsed."""
    return [ET.fromstring(s) for s in re.findall(r'<svg class="chart".*?</svg>', html, flags=re.S)]


def pictures(html: str) -> list[ET.Element]:
    """Every chart and every per-token heat map (``<svg class="tokens ...">``) of a page, parsed."""
    return [
        ET.fromstring(s) for s in re.findall(r'<svg class="(?:chart|tokens)[^"]*".*?</svg>', html, flags=re.S)
    ]


def _texts(svg: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in svg.iter() if _local(e.tag) == "text" and cls in (e.get("class") or "").split(" ")]


def _backdrop(rects: list[tuple[float, float, float, float, str]], x: float, y: float) -> str:
    """The fill of the last painted rect under (x, y), else the page's white."""
    for rx, ry, w, h, fill in reversed(rects):
        if rx <= x <= rx + w and ry <= y <= ry + h:
            return fill
    return "#ffffff"


def label_contrasts(svg: ET.Element) -> list[tuple[str, str, str, float]]:
    """(text, its fill, the fill behind it, their contrast) for every ``<text>``, in paint order."""
    rects: list[tuple[float, float, float, float, str]] = []
    out = []
    for el in svg.iter():
        tag = _local(el.tag)
        if tag == "rect" and el.get("fill") not in (None, "none"):
            x, y = float(el.get("x", 0)), float(el.get("y", 0))
            rects.append((x, y, float(el.get("width", 0)), float(el.get("height", 0)), str(el.get("fill"))))
        elif tag == "text":
            fill = el.get("fill")
            assert fill, f"text {el.text!r} has no fill attribute"
            # The glyphs' middle: a few pixels above the baseline y.
            behind = _backdrop(rects, float(el.get("x", 0)), float(el.get("y", 0)) - 4)
            out.append((el.text or "", fill, behind, contrast(fill, behind)))
    return out


@pytest.fixture(scope="module", params=sorted(PAGES))
def page(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    name = str(request.param)
    return name, PAGES[name](tmp_path_factory.mktemp(name)).read_text(encoding="utf-8")


class TestContrast:
    def test_the_luminance_maths_matches_wcag_reference_values(self) -> None:
        assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
        assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)  # the classic near-miss
        assert contrast("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)

    def test_every_chart_label_reaches_aa_on_what_it_sits_on(self, page: tuple[str, str]) -> None:
        name, html = page
        found = [row for svg in pictures(html) for row in label_contrasts(svg)]
        assert len(found) > 20, name
        if name == "audit":  # its log carries per-token data: the heat map's labels are checked too
            assert any("tokens" in (svg.get("class") or "") for svg in pictures(html))
        poor = [row for row in found if row[3] < AA]
        assert not poor, f"{name}: {poor[:5]}"

    def test_the_page_text_colours_reach_aa_on_white_and_on_table_headers(
        self, page: tuple[str, str]
    ) -> None:
        name, html = page
        colours = re.findall(r"(?<![-\w])color:\s*(#[0-9a-fA-F]{3,6})", html)
        assert colours, name
        for colour in colours:
            for background in ("#ffffff", "#f4f4f4"):
                assert contrast(colour, background) >= AA, (name, colour, background)

    def test_a_value_on_the_darkest_cell_is_white_and_on_a_pale_one_black(self) -> None:
        svg = ET.fromstring(heat_map(["a"], ["x", "y"], [[1.0, 10.0]], title="t"))
        cells = {t.text: (t.get("fill"), behind) for t, (_, _, behind, _) in zip(
            [e for e in svg.iter() if _local(e.tag) == "text"], label_contrasts(svg), strict=True
        )}  # fmt: skip
        assert cells["10"][0] == "#ffffff" and contrast("#ffffff", cells["10"][1]) >= AA
        assert cells["1"][0] == "#000000"


def _numbers(labels: list[ET.Element]) -> list[float] | None:
    try:
        return [float(t.text or "") for t in labels]
    except ValueError:
        return None


class TestTicks:
    def test_every_chart_has_labelled_ticks_and_titles_on_both_axes(self, page: tuple[str, str]) -> None:
        name, html = page
        svgs = charts(html)
        assert len(svgs) >= {"audit": 5, "eval": 2, "sweep": 4}[name]
        for svg in svgs:
            label = svg.get("aria-label")
            grid = any(e.get("class") == "cell" for e in svg.iter())
            xs, ys = _texts(svg, "x"), _texts(svg, "y")
            assert len(xs) >= (1 if grid else 2) and len(ys) >= (1 if grid else 2), label
            assert all((t.text or "").strip() for t in xs + ys), label
            assert len(_texts(svg, "axis-title")) == 2, label
            if grid:
                continue
            x_values, y_values = _numbers(xs), _numbers(ys)
            x_at = [float(t.get("x", 0)) for t in xs]
            y_at = [float(t.get("y", 0)) for t in ys]
            assert y_values is not None and y_values == sorted(y_values), label
            assert y_at == sorted(y_at, reverse=True), label  # larger values higher up
            if x_values is not None:
                assert x_values == sorted(x_values) and x_at == sorted(x_at), label


def _frame(svg: ET.Element) -> tuple[float, float, float, float]:
    """The plot area: the rect with the frame's stroke."""
    rect = next(e for e in svg.iter() if _local(e.tag) == "rect" and e.get("stroke"))
    x, y = float(rect.get("x", 0)), float(rect.get("y", 0))
    return x, y, x + float(rect.get("width", 0)), y + float(rect.get("height", 0))


class TestAuditCharts:
    def test_the_reliability_diagram_draws_its_diagonal_and_keeps_points_off_the_frame(
        self, tmp_path: Path
    ) -> None:
        html = audit_page(tmp_path).read_text(encoding="utf-8")
        svg = next(s for s in charts(html) if (s.get("aria-label") or "").startswith("Reliability"))
        assert any(e.get("class") == "diagonal" for e in svg.iter())
        assert "dashed diagonal" in html
        x0, y0, x1, y1 = _frame(svg)
        points = [e for e in svg.iter() if e.get("class") == "point"]
        assert points
        for p in points:
            cx, cy = float(p.get("cx", 0)), float(p.get("cy", 0))
            assert x0 + 10 <= cx <= x1 - 10 and y0 + 10 <= cy <= y1 - 10


class TestEvalCharts:
    def test_each_system_is_a_curve_of_its_own_style_with_its_operating_point(self, tmp_path: Path) -> None:
        html = eval_page(tmp_path).read_text(encoding="utf-8")
        report = eval_report()
        reliability, risk = charts(html)
        assert any(e.get("class") == "diagonal" for e in reliability.iter())
        for svg in (reliability, risk):
            lines = [e for e in svg.iter() if e.get("class") == "series"]
            assert len(lines) == len(report["systems"]) == 5
            styles = {(e.get("stroke"), e.get("stroke-dasharray"), e.get("stroke-width")) for e in lines}
            assert len(styles) == 5
        rings = [e for e in risk.iter() if e.get("class") == "operating"]
        with_point = [n for n, row in report["systems"].items() if row["accepted_precision"] is not None]
        assert len(rings) == len(with_point) == 5
        titles = [ring.findtext("{http://www.w3.org/2000/svg}title") or "" for ring in rings]
        assert any(t.startswith("agent its operating point: 0.0417, 0.000") for t in titles), titles

    def test_series_with_the_same_points_are_named_in_a_note(self, tmp_path: Path) -> None:
        html = eval_page(tmp_path).read_text(encoding="utf-8")
        curves = eval_report()["curves"]
        assert curves["calculator@8"]["risk_coverage"] == curves["python@8"]["risk_coverage"]
        notes = re.findall(r'<p class="note">([^<]*)</p>', html)
        assert any("calculator@8 and python@8 have the same points" in n for n in notes), notes

    def test_systems_at_the_same_operating_point_are_named_even_with_different_curves(self) -> None:
        report = copy.deepcopy(eval_report())
        report["systems"]["model@1"].update(coverage=1.0, accepted_precision=1.0)
        report["systems"]["model@20"].update(coverage=1.0, accepted_precision=1.0)
        assert report["curves"]["model@1"] != report["curves"]["model@20"]
        notes = re.findall(r'<p class="note">([^<]*)</p>', render_html(report, title="t"))
        assert any("model@1 and model@20 stand at the same point (1.00, 1.00)" in n for n in notes), notes
        assert any("calculator@8 and python@8 stand at the same point (0.58, 0.43)" in n for n in notes)

    def test_the_figures_table_has_the_columns_and_labels_the_command_prints(self) -> None:
        report = eval_report()
        html = render_html(report, title="t")
        printed = [str(c.header) for c in _eval_table("t", report["systems"]).columns]
        assert re.findall(r"<th>([^<]*)</th>", html.split("</table>")[0]) == printed
        assert "ungated accuracy" in printed and "accepted precision" in printed
        row = re.findall(r"<td>([^<]*)</td>", html.split("</table>")[0])
        assert row[:2] == ["agent", "24"]

    def test_no_stratum_heading_without_strata(self) -> None:
        report = {**eval_report(), "strata": {}}
        assert "By stratum" not in render_html(report, title="t")
        assert "By stratum" in render_html(eval_report(), title="t")


class TestSweepCharts:
    def test_the_legend_names_only_the_knob_that_varies_and_unset_as_unset(self, tmp_path: Path) -> None:
        html = sweep_page(tmp_path).read_text(encoding="utf-8")
        for svg in charts(html):
            names = {
                e.findtext("{http://www.w3.org/2000/svg}title")
                for e in svg.iter()
                if e.get("class") == "series"
            }
            assert names == {"top_p unset", "top_p 0.9"}
        assert "=-" not in "".join(re.findall(r'<svg class="chart".*?</svg>', html, flags=re.S))
        assert "The same at every point: min_p unset." in html

    def test_one_setting_draws_one_line_without_a_legend(self, tmp_path: Path) -> None:
        html = sweep_page(tmp_path, top_ps=(None,)).read_text(encoding="utf-8")
        for svg in charts(html):
            assert len([e for e in svg.iter() if e.get("class") == "series"]) == 1
        assert "top_p unset; min_p unset" in html

    def test_the_page_table_has_every_column_the_command_prints(self, tmp_path: Path) -> None:
        rows = sweep_rows(tmp_path)
        html = sweep_page(tmp_path).read_text(encoding="utf-8")
        table = html.split("</table>")[0]
        printed = [str(c.header) for c in _sweep_table(rows).columns]
        assert printed == re.findall(r"<th>([^<]*)</th>", table) == [c[0] for c in SWEEP_COLUMNS]
        assert "cut off" in printed and "default samples" in printed

    def test_each_coincidence_note_sits_under_the_one_chart_it_is_true_for(self) -> None:
        rows = [
            {"temperature": t, "top_p": top_p, "min_p": None, "majority_accuracy": 0.5 + t / 4,
             "default_accuracy": 0.25 + (top_p or 0.0) / 10, "mean_tokens": 40.0 + t * 10 + (top_p or 0.0),
             "parse_failure_rate": 0.0}
            for t in (0.2, 0.7) for top_p in (None, 0.9)
        ]  # fmt: skip
        html = render_sweep_html(rows, title="t")
        divs = re.findall(r"<div>(.*?)</div>", html, flags=re.S)
        assert len(divs) == 4
        for div in divs:
            label = re.search(r'aria-label="([^"]*)"', div)
            notes = re.findall(r'<p class="note">([^<]*)</p>', div)
            assert label is not None
            if label.group(1) in ("Majority accuracy (all K samples)", "Samples with no answer"):
                assert notes == [
                    f"{label.group(1)}: top_p unset and top_p 0.9 have the same points, "
                    "their lines lie on one another (told apart by width, dash and marker)."
                ]
            else:
                assert notes == [], label.group(1)


class TestScreenshots:
    def test_every_picture_the_docs_show_is_committed_and_small(self) -> None:
        docs = Path(__file__).resolve().parents[2] / "docs"
        shown = {
            (page, name)
            for page in docs.glob("*.md")
            for name in re.findall(r"\]\((img/[^)]+\.png)\)", page.read_text())
        }
        assert {name for _, name in shown} >= {
            "img/audit-flow.png",
            "img/eval-risk.png",
            "img/sweep-curves.png",
        }
        for page, name in shown:
            png = docs / name
            assert png.is_file(), f"{page.name} shows {name}: missing (make screenshots)"
            data = png.read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 150_000, name


class TestAuditPanels:
    def test_the_histogram_says_what_it_plots_and_each_bar_starts_at_its_bin(self, tmp_path: Path) -> None:
        html = audit_page(tmp_path).read_text(encoding="utf-8")
        assert "Fused confidence" not in html
        said = "The confidence each verdict was decided on (calibrated where a calibration is applied)"
        assert said in html
        svg = next(s for s in charts(html) if (s.get("aria-label") or "").startswith("The confidence each"))
        ticks = {
            e.text: float(e.get("x", 0)) for e in _texts(svg, "tick") if "x" in (e.get("class") or "").split()
        }
        bars = [e for e in svg.iter() if e.get("class") == "bar"]
        starts = [(b.findtext("{http://www.w3.org/2000/svg}title") or "").split(":")[0] for b in bars]
        checked = [(b, s) for b, s in zip(bars, starts, strict=True) if s in ticks]
        assert len(checked) >= 5
        for bar, start in checked:
            assert abs(float(bar.get("x", 0)) - ticks[start]) < 0.2, start

    def test_a_point_at_the_largest_x_is_drawn_whole_inside_the_frame(self) -> None:
        svg = ET.fromstring(scatter([(1.0, 0.5, 1.0), (3.0, 1.0, 9.0)], title="t", x_label="x", y_label="y"))
        x0, y0, x1, y1 = _frame(svg)
        for p in (e for e in svg.iter() if e.get("class") == "point"):
            cx, cy, r = (float(p.get(k, 0)) for k in ("cx", "cy", "r"))
            assert x0 < cx - r and cx + r < x1 and y0 < cy - r and cy + r < y1

    def test_the_black_holes_count_one_step_in_the_singular(self) -> None:
        assert _count(1, "step") == "1 step"
        assert _count(0, "step") == "0 steps" and _count(2, "step") == "2 steps"
