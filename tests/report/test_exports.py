"""Pins the public names of retryctl.report."""

from __future__ import annotations

import retryctl.report

REPORT = {
    "CONFIDENCE_BINS", "PARALLEL_MIN_BYTES", "Analysis", "StepOutcome", "TokenRow", "analyse",
    "analyse_records",
    "answers_match", "audit_log", "audit_summary", "diff_sides", "iter_raw_records", "reason_shape",
    "render_diff",
    "render_html", "render_summary", "render_verification", "run_story", "side_figures", "start_verification",
    "story_lines", "summarise",
}  # fmt: skip


class TestExports:
    def test_report_exports_are_pinned(self) -> None:
        assert set(retryctl.report.__all__) == REPORT
        assert all(hasattr(retryctl.report, name) for name in REPORT)
