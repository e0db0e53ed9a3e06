"""The audit's stop reasons: one row per budget that stopped steps, the same in every audit path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from retryctl.controller import Budget, Exhaustion, Ledger, Usage
from retryctl.report import analyse, audit_summary, render_summary, summarise
from retryctl.report._analyse import analyse_plain
from tests.report._logs import verdict, write_verdicts
from tests.report._summary_reference import reference_summarise


def _refused(budget: Budget, spent: Usage, estimate: Usage, step: str) -> str:
    """The reason a real ledger gives when ``estimate`` no longer fits after ``spent``."""
    ledger = Ledger().step(step, budget=budget)
    ledger.reserve(spent).commit(spent)
    refused = ledger.try_reserve(estimate)
    assert isinstance(refused, Exhaustion)
    return str(refused)


@pytest.fixture(scope="module")
def two_budgets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    usd_a = _refused(Budget(usd=0.0005), Usage(), Usage(attempts=1, usd=0.00099), "q0")
    usd_b = _refused(Budget(usd=0.002), Usage(usd=0.0015), Usage(attempts=1, usd=0.00099), "q1")
    tokens = _refused(Budget(output_tokens=100), Usage(output_tokens=90), Usage(output_tokens=90), "q2")
    rows = [
        ("r0", "q0", verdict("switch", 0.4), "m"),
        ("r0", "q0", verdict("stop", 0.4, reason=usd_a), "calc"),
        ("r1", "q1", verdict("stop", 0.5, reason=usd_b), "m"),
        ("r2", "q2", verdict("refine", 0.3), "m"),
        ("r2", "q2", verdict("stop", 0.3, reason=tokens), "m"),
        ("r3", "q3", verdict("stop", 0.2, reason="breaker of 'm' is open; no alternative left"), "m"),
        ("r4", "q4", verdict("accept", 0.95), "m"),
    ]
    return write_verdicts(tmp_path_factory.mktemp("stops") / "log.jsonl", rows)


def _rows(summary: dict[str, Any]) -> list[tuple[str | None, int, str]]:
    return [(r["budget"], r["steps"], r["reason"]) for r in summary["stop_reasons"]]


class TestStopReasons:
    def test_each_budget_is_a_row_with_its_real_figures(self, two_budgets: Path) -> None:
        rows = _rows(summarise(analyse([two_budgets])))
        assert rows == [
            (
                "usd",
                2,
                "step 'q0' budget 'usd' would be exceeded: 0.00099 estimated for this call + 0 spent"
                " > limit 0.0005",
            ),
            (
                "output_tokens",
                1,
                "step 'q2' budget 'output_tokens' would be exceeded: 90 estimated for this call + 90 spent"
                " > limit 100",
            ),
            (None, 1, "breaker of 'm' is open; no alternative left"),
        ]

    @pytest.mark.parametrize("share", [0.1, 0.4, 0.6, 0.9])
    def test_every_audit_path_gives_the_same_rows(self, two_budgets: Path, share: float) -> None:
        plain = summarise(analyse_plain([two_budgets]))
        _, fast = audit_summary(str(two_budgets), min_bytes=0, first_share=share)
        assert json.dumps(fast["stop_reasons"]) == json.dumps(plain["stop_reasons"])
        assert json.dumps(summarise(analyse([two_budgets]))) == json.dumps(plain)
        reference = reference_summarise(analyse_plain([two_budgets]))
        assert json.dumps(reference["stop_reasons"]) == json.dumps(plain["stop_reasons"])
        assert [r[0] for r in _rows(fast)] == ["usd", "output_tokens", None]

    def test_the_text_report_shows_one_line_per_budget(self, two_budgets: Path) -> None:
        console = Console(record=True, width=220, color_system=None)
        render_summary(summarise(analyse([two_budgets])), console)
        text = console.export_text()
        table = text[text.index("Stop reasons") : text.index("Samples and attempts per step")]
        lines = [line for line in table.splitlines() if line.startswith("│")]
        assert len(lines) == 3
        assert "usd" in lines[0] and lines[0].rstrip(" │").endswith("2")
        assert "output_tokens" in lines[1] and lines[1].rstrip(" │").endswith("1")
        assert "—" in lines[2]
