"""The three HTML reports (``audit``, ``eval``, ``sweep``) built from inputs in their real formats.

The audit's from a log written by real ``ControlledStep`` graphs (:func:`tests.report._logs.graph_log`);
eval's from a real run kept under ``data/eval_set_b/`` (``bench/graded_eval.py``'s development set B on
the embedded model with the shipped calibration: 24 tasks, five systems, two of which, calculator@8
and python@8, have the same results); the sweep's from banks in the format ``retryctl record``
writes, one per grid point, read back by the sweep's own figures.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from retryctl.audit import verify_log
from retryctl.evals._report import evaluation
from retryctl.evals._report import render_html as render_eval
from retryctl.record._sweep import GridPoint, grid, point_figures, render_sweep_html
from retryctl.report import analyse, render_html, summarise
from tests.report._logs import graph_log

EVAL_RUN = Path(__file__).parent / "data" / "eval_set_b"
SWEEP_TEMPERATURES = (0.3, 0.7, 1.0, 1.3)
SWEEP_TOP_PS = (None, 0.9)


def audit_page(tmp: Path) -> Path:
    """``retryctl audit --html`` of a graph log with gold answers and per-token logprobs."""
    log = graph_log(tmp / "graph.jsonl", token_logprobs=True)
    a = analyse([log])
    out = tmp / "audit.html"
    out.write_text(render_html(a, summarise(a), [verify_log(log)]), encoding="utf-8")
    return out


def _lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (EVAL_RUN / name).read_text(encoding="utf-8").splitlines()]


def eval_report() -> dict[str, Any]:
    """The figures ``retryctl eval`` computes from the kept run."""
    return evaluation(_lines("agent.jsonl"), _lines("baselines.jsonl"))


def eval_page(tmp: Path) -> Path:
    """``retryctl eval --html`` of the kept run."""
    out = tmp / "eval.html"
    out.write_text(render_eval(eval_report(), title="retryctl eval: set-b.jsonl"), encoding="utf-8")
    return out


def _bank(path: Path, point: GridPoint, seed: int) -> Path:
    """Six tasks of five samples each: hotter points answer wrong, ramble and get cut off more often."""
    rng = random.Random(seed)
    lines = []
    for i in range(6):
        gold = str(10 + i)
        samples = []
        for _ in range(5):
            wrong = rng.random() < 0.2 + 0.4 * point.temperature
            cut = rng.random() < 0.3 * point.temperature
            tokens = 8 + int(rng.random() * 20 * point.temperature) + (30 if cut else 0)
            answer = None if cut else (str(int(gold) + 1) if wrong else gold)
            samples.append(
                {
                    "text": f"The answer is {answer}." if answer else "Let me think step by step about",
                    "answer": answer,
                    "tokens": tokens,
                    "finish_reason": "length" if cut else "stop",
                    "token_logprobs": [round(-rng.random() * point.temperature, 4) for _ in range(tokens)],
                }
            )
        lines.append({"id": f"t{i}", "question": f"What is {gold} + 0?", "gold": gold, "samples": samples})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def sweep_rows(tmp: Path, top_ps: tuple[float | None, ...] = SWEEP_TOP_PS) -> list[dict[str, Any]]:
    """The sweep's figures of one bank per grid point (temperature × top_p, min_p left unset)."""
    return [
        point_figures(p, _bank(tmp / p.file_name, p, seed=i))
        for i, p in enumerate(grid(SWEEP_TEMPERATURES, top_ps, [None]))
    ]


def sweep_page(tmp: Path, top_ps: tuple[float | None, ...] = SWEEP_TOP_PS) -> Path:
    """``retryctl sweep --html`` over :data:`SWEEP_TEMPERATURES` × ``top_ps``."""
    out = tmp / "sweep.html"
    out.write_text(
        render_sweep_html(sweep_rows(tmp, top_ps), title="retryctl sweep: t.jsonl"), encoding="utf-8"
    )
    return out
