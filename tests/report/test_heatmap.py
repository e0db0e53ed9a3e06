"""The per-token heat map: colours, contrast, legend, hover text, the accepted row, one section per step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from retryctl.report._heatmap import (
    PER_LINE,
    _ticks,
    contrast,
    scale_max,
    text_colour,
    token_colour,
    token_map_html,
)
from retryctl.report._model import Analysis, TokenRow, add_token_rows, attempt_label
from tests.report._reports import audit_page


def _rows() -> list[TokenRow]:
    out = Analysis()
    for step in ("run/q1", "run/q2"):
        add_token_rows(
            out,
            "attempt 1",
            {
                "token_samples": [
                    {
                        "sample": i,
                        "accepted": i == 1,
                        "answer": "42",
                        "token_text": ["The", " answer", " <is>", " 42"],
                        "token_logprobs": [-0.1, -0.2, -1.5, -3.0],
                        "token_entropy": [0.1, 0.4, 2.2, 3.4],
                        "entropy_kind": "top5",
                        "token_top3": [0.99, 0.95, 0.6, 0.4],
                        "tokens_total": 70,
                    }
                    for i in range(3)
                ]
            },
            step,
        )
    return out.token_rows


class TestColours:
    def test_every_cell_text_passes_wcag_aa(self) -> None:
        for i in range(201):
            fill = token_colour(i / 200 * 4.0, 4.0)
            assert contrast(fill, text_colour(fill)) >= 4.5, fill

    def test_light_for_calm_tokens_dark_for_unsure_ones(self) -> None:
        assert text_colour(token_colour(0.0, 4.0)) == "#000000"
        assert text_colour(token_colour(4.0, 4.0)) == "#ffffff"

    def test_the_scale_ends_on_a_round_value_with_round_ticks(self) -> None:
        assert scale_max(_rows()) == 4.0
        assert _ticks(4.0) == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert _ticks(1.5) == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5]


class TestTokenMap:
    def test_one_section_per_step_one_row_per_candidate(self) -> None:
        html = token_map_html(_rows())
        assert [m for m in re.findall(r"<h3>([^<]+) <small>", html)] == ["run/q1", "run/q2"]
        assert html.count('<g class="tok">') == 2 * 3 * 4
        assert html.count('class="accepted"') == 2  # the accepted candidate of each step, outlined
        assert "✓ attempt 1 · s1 → 42 (4 of 70)" in html

    def test_hover_gives_the_token_and_its_values_escaped(self) -> None:
        html = token_map_html(_rows())
        assert (
            "<title>token 2 &#x27; &lt;is&gt;&#x27; · logprob -1.500 (p 0.223) · entropy 2.200 nats, top5 · "
            "top-3 mass 0.600</title>" in html
        )
        assert "<script" not in html and "href" not in html

    def test_the_legend_is_labelled_in_nats(self) -> None:
        html = token_map_html(_rows())
        legend = re.search(r'<svg class="tokens legend".*?</svg>', html)
        assert legend is not None and "entropy (nats)" in legend.group(0)
        assert re.findall(r'text-anchor="middle">([^<]+)<', legend.group(0)) == ["0", "1", "2", "3", "4"]

    def test_surprisal_rows_say_so(self) -> None:
        out = Analysis()
        add_token_rows(out, "sample 1", {"token_logprobs": [-0.5, -2.0]}, "run/q")
        html = token_map_html(out.token_rows)
        assert "surprisal −log p" in html and "sample 1 (−log p)" in html

    def test_nothing_to_draw_is_empty(self) -> None:
        assert token_map_html([]) == ""


@pytest.mark.parametrize("n", [32, 33, 64])
def test_long_candidates_wrap(n: int) -> None:
    row = TokenRow(label="a", values=[0.5] * n, kind="entropy", group="g")
    html = token_map_html([row])
    ys = {int(y) for y in re.findall(r'<rect class="cell" x="\d+" y="(\d+)"', html)}
    assert PER_LINE == 32 and len(ys) == -(-n // PER_LINE)


class TestRowLabels:
    def test_a_verdicts_row_names_the_member_that_made_it(self, tmp_path: Path) -> None:
        html = audit_page(tmp_path).read_text(encoding="utf-8")
        labels = set(re.findall(r'<text class="lab"[^>]*>([^<]*)<', html))
        assert any(label.startswith("attempt 2 · large · s1") for label in labels), sorted(labels)
        assert any(label.startswith("attempt 1 · small · s0") for label in labels)

    def test_a_long_model_name_is_cut_to_fit_the_label_column(self) -> None:
        assert attempt_label(2, "calculator") == "attempt 2 · calculator"
        assert attempt_label(1, "SmolLM2-135M-Instruct-Q4") == "attempt 1 · SmolLM2-135M-In…"
