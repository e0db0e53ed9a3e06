"""A bank keeps the decision log's per-token fields, and ``sweep --html`` draws one heat map per grid
point from them (the real embedded model)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from retryctl.cli import app
from retryctl.record._sweep_tokens import bank_token_rows
from tests.models.conftest import needs_llama

runner = CliRunner()
TASKS = [
    {"id": "a", "question": "What is 2 + 3?", "gold": 5},
    {"id": "b", "question": "What is 4 * 3?", "gold": 12},
]
ARGS = ["--samples", "2", "--max-tokens", "8", "--extract", "number"]


@needs_llama
class TestSweepHeatMaps:
    def test_a_bank_sample_carries_the_logs_fields_and_each_point_gets_a_map(self, tmp_path: Path) -> None:
        tasks, out, page = tmp_path / "tasks.jsonl", tmp_path / "sweep", tmp_path / "sweep.html"
        tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS), encoding="utf-8")
        args = ["sweep", str(tasks), "--out", str(out), "--temperature", "0.2,1.5", *ARGS, "--json"]
        done = runner.invoke(app, [*args, "--html", str(page)])
        assert done.exit_code == 0, done.output
        bank = sorted(out.glob("bank-*.jsonl"))[0]
        sample = json.loads(bank.read_text(encoding="utf-8").splitlines()[0])["samples"][0]
        n = len(sample["token_logprobs"])
        assert sample["entropy_kind"] == "full" and n > 0
        assert len(sample["token_text"]) == len(sample["token_entropy"]) == len(sample["token_top3"]) == n
        assert "".join(sample["token_text"]) == sample["text"]
        html = page.read_text(encoding="utf-8")
        points = re.findall(r'<section class="point"><h3>([^<]+)</h3>', html)
        assert points == [f"temperature {t}, top_p unset, min_p unset" for t in ("0.2", "1.5")]
        cells = sum(len(bank_token_rows(p)[i].values) for p in out.glob("bank-*.jsonl") for i in range(4))
        assert html.count('<g class="tok">') == cells
        assert "<script" not in html
