"""Fixtures running every attack through both isolating tiers and both entry points.

A tier is skipped only when the probe (what ``retryctl doctor`` shows) says this machine cannot run
it, and the skip carries the probe's reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from retryctl.sandbox import ExecResult, Sandbox, SandboxLimits, Tier, probe_tiers, run_code

TIERS = [Tier.BUBBLEWRAP, Tier.LANDLOCK]
# Small disk and file limits keep the disk and flood attacks quick.
TEST_LIMITS = SandboxLimits(disk_mb=16, max_file_mb=4, max_output_bytes=64 * 1024, nproc=32, max_files=2000)

Runner = Callable[..., ExecResult]


def require_tier(tier: Tier) -> None:
    """Skip with the probe's reason when this machine cannot run ``tier``."""
    status = probe_tiers().status(tier)
    if not status.available:
        pytest.skip(f"{tier.value} tier unavailable here (probe: {status.reason})")


@pytest.fixture(scope="module", params=TIERS, ids=lambda t: t.value)
def tier(request: pytest.FixtureRequest) -> Tier:
    require_tier(request.param)
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def pool(tier: Tier) -> Iterator[Sandbox]:
    with Sandbox(tier=tier, limits=TEST_LIMITS) as sandbox:
        yield sandbox


@pytest.fixture(params=["run_code", "Sandbox.run"])
def run(request: pytest.FixtureRequest, tier: Tier) -> Runner:
    """``run(code, **kw)`` through a fresh sandbox or the warm pool of ``tier``."""
    if request.param == "run_code":

        def cold(code: str, **kw: Any) -> ExecResult:
            return run_code(code, tier=tier, limits=TEST_LIMITS, **kw)

        return cold
    sandbox: Sandbox = request.getfixturevalue("pool")
    return sandbox.run


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (stragglers the sandbox should have killed)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found
