"""Replay sample banks through stopping policies: loading, the order contract, reports."""

from __future__ import annotations

from retryctl.bench._bank import NO_ANSWER, Bank, BankQuestion, load_bank
from retryctl.bench._replay import ReplayResult, make_orders, replay
from retryctl.bench._report import (
    STRATA,
    CurvePoint,
    curve_for,
    paired_delta,
    run_policies,
    strata_of,
    summary_row,
)
from retryctl.bench._synthetic import DIFFICULTY_SHARES, write_synthetic_bank
from retryctl.controller.stopping import BUILTIN_POLICIES

BUILTIN_BENCH_POLICIES = tuple(BUILTIN_POLICIES)
"""The policies ``retryctl bench`` replays when none is named."""

__all__ = [
    "BUILTIN_BENCH_POLICIES",
    "DIFFICULTY_SHARES",
    "NO_ANSWER",
    "STRATA",
    "Bank",
    "BankQuestion",
    "CurvePoint",
    "ReplayResult",
    "curve_for",
    "load_bank",
    "make_orders",
    "paired_delta",
    "replay",
    "run_policies",
    "strata_of",
    "summary_row",
    "write_synthetic_bank",
]
