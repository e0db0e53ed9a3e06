"""Replay sample banks through stopping policies: loading, the order contract, reports."""

from __future__ import annotations

from retryctl.controller.stopping import BUILTIN_POLICIES
from retryctl.replay._bank import NO_ANSWER, CodedBank, CodedQuestion, code_bank
from retryctl.replay._replay import ReplayResult, make_orders, replay
from retryctl.replay._report import (
    STRATA,
    CurvePoint,
    curve_for,
    paired_delta,
    run_policies,
    strata_of,
    summary_row,
)
from retryctl.replay._synthetic import DIFFICULTY_SHARES, write_synthetic_bank

BUILTIN_BENCH_POLICIES = tuple(BUILTIN_POLICIES)
"""The policies ``retryctl bench`` replays when none is named."""

__all__ = [
    "BUILTIN_BENCH_POLICIES",
    "DIFFICULTY_SHARES",
    "NO_ANSWER",
    "STRATA",
    "CodedBank",
    "CodedQuestion",
    "CurvePoint",
    "ReplayResult",
    "code_bank",
    "curve_for",
    "make_orders",
    "paired_delta",
    "replay",
    "run_policies",
    "strata_of",
    "summary_row",
    "write_synthetic_bank",
]
