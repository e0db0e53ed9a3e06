"""Decision-log analysis and reports: what ``retryctl audit`` prints, as data and as HTML.

:func:`analyse` reads logs in one pass into an :class:`Analysis`; :func:`summarise` turns it into the
audit's sections (plain JSON values); :func:`run_story` and :func:`story_lines` tell one run's story;
:func:`side_figures` and :func:`diff_sides` compare two runs or two logs; :func:`render_html` writes
the self-contained report with its plots. Chain verification is :func:`retryctl.audit.verify_log`;
:func:`audit_log` does both for one log in one pass (two processes for a large one).
"""

from retryctl.report._analysis import (
    CONFIDENCE_BINS,
    Analysis,
    StepOutcome,
    TokenRow,
    analyse,
    analyse_records,
    answers_match,
)
from retryctl.report._diff import diff_sides, side_figures
from retryctl.report._html import render_html
from retryctl.report._load import iter_raw_records
from retryctl.report._parallel import PARALLEL_MIN_BYTES, start_verification
from retryctl.report._split import audit_log
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
    "answers_match",
    "audit_log",
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
