"""Decision-log analysis and reports: what ``retryctl audit`` prints, as data and as HTML.

:func:`analyse` reads logs in one pass into an :class:`Analysis`; :func:`summarise` turns it into the
audit's sections (plain JSON values); :func:`run_story` and :func:`story_lines` tell one run's story;
:func:`side_figures` and :func:`diff_sides` compare two runs or two logs; :func:`render_html` writes
the self-contained report with its plots. Chain verification is :func:`retryctl.audit.verify_log`;
:func:`audit_log` does both for one log in one pass (two processes for a large one), and
:func:`audit_summary` gives the summary straight away.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retryctl._lazy import lazy_exports

if TYPE_CHECKING:
    from retryctl.report._analyse import analyse, analyse_records
    from retryctl.report._audit import audit_log, audit_summary
    from retryctl.report._diff import diff_sides, side_figures
    from retryctl.report._html import render_html
    from retryctl.report._load import iter_raw_records
    from retryctl.report._model import (
        CONFIDENCE_BINS,
        PARALLEL_MIN_BYTES,
        Analysis,
        StepOutcome,
        TokenRow,
    )
    from retryctl.report._parallel import start_verification
    from retryctl.report._story import run_story, story_lines
    from retryctl.report._summary import reason_shape, summarise
    from retryctl.report._text import render_diff, render_summary, render_verification

__all__ = [
    "CONFIDENCE_BINS",
    "PARALLEL_MIN_BYTES",
    "Analysis",
    "StepOutcome",
    "TokenRow",
    "analyse",
    "analyse_records",
    "audit_log",
    "audit_summary",
    "diff_sides",
    "iter_raw_records",
    "reason_shape",
    "render_diff",
    "render_html",
    "render_summary",
    "render_verification",
    "run_story",
    "side_figures",
    "start_verification",
    "story_lines",
    "summarise",
]

# Each name is imported from its module on first use (PEP 562), so that `retryctl audit LOG --json`
# imports neither rich nor the HTML, diff and story code: with them it took ~20 ms longer to start.
_MODULES = {
    "CONFIDENCE_BINS": "_model",
    "PARALLEL_MIN_BYTES": "_model",
    "Analysis": "_model",
    "StepOutcome": "_model",
    "TokenRow": "_model",
    "analyse": "_analyse",
    "analyse_records": "_analyse",
    "audit_log": "_audit",
    "audit_summary": "_audit",
    "diff_sides": "_diff",
    "side_figures": "_diff",
    "render_html": "_html",
    "iter_raw_records": "_load",
    "start_verification": "_parallel",
    "run_story": "_story",
    "story_lines": "_story",
    "reason_shape": "_summary",
    "summarise": "_summary",
    "render_diff": "_text",
    "render_summary": "_text",
    "render_verification": "_text",
}


__getattr__, __dir__ = lazy_exports(globals(), _MODULES)
