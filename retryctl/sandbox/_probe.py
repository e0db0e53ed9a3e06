"""Which isolation tiers this machine can run, found once by trying them (``retryctl doctor`` shows it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache

from pydantic import BaseModel, ConfigDict

from retryctl.sandbox._errors import SandboxUnavailable
from retryctl.sandbox._launch import (
    PYTHON,
    allocate_uid,
    release_uid,
    root_layout,
    running_as_root,
    uid_switch,
)
from retryctl.sandbox._result import Tier
from retryctl.sandbox._seccomp import SeccompUnsupported, base_filter

__all__ = ["ProbeReport", "TierStatus", "detect_tier", "probe_tiers"]

_BWRAP_CHECK = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
                "--cap-drop", "ALL", "--clearenv", "--proc", "/proc", "--dev", "/dev",
                "--uid", "65534", "--gid", "65534"]  # fmt: skip


class TierStatus(BaseModel):
    """Whether one tier can run here, and why not when it cannot."""

    model_config = ConfigDict(frozen=True)

    tier: Tier
    available: bool
    """The tier's requirements were met and (for bubblewrap) a trial sandbox ran."""
    reason: str
    """What was found: the versions that make it work, or what is missing."""


class ProbeReport(BaseModel):
    """Every tier's status, strongest first."""

    model_config = ConfigDict(frozen=True)

    tiers: tuple[TierStatus, ...]
    landlock_abi: int
    """The kernel's Landlock ABI version (0: none)."""

    def status(self, tier: Tier) -> TierStatus:
        """The status of ``tier``."""
        return next(s for s in self.tiers if s.tier is tier)

    def summary(self) -> list[str]:
        """One line per tier for ``retryctl doctor``: ``"bubblewrap: yes (bubblewrap 0.8.0, ...)"``."""
        return [f"{s.tier.value}: {'yes' if s.available else 'no'} ({s.reason})" for s in self.tiers]

    def best(self, *, unsafe: bool = False) -> Tier:
        """The strongest available tier; the unsafe tier only when ``unsafe`` is true."""
        for status in self.tiers:
            if status.available and (status.tier is not Tier.UNSAFE or unsafe):
                return status.tier
        raise SandboxUnavailable(
            wanted="any isolating tier", reasons={s.tier.value: s.reason for s in self.tiers}
        )


def _python_problem() -> str | None:
    if not os.access(PYTHON, os.X_OK):
        return f"{PYTHON} is missing (the sandbox runs the system interpreter)"
    return None


def _seccomp_problem() -> str | None:
    try:
        base_filter()
    except SeccompUnsupported as exc:
        return str(exc)
    return None


def _probe_bwrap() -> TierStatus:
    problem = _python_problem() or _seccomp_problem()
    if problem:
        return TierStatus(tier=Tier.BUBBLEWRAP, available=False, reason=problem)
    exe = shutil.which("bwrap")
    if exe is None:
        return TierStatus(
            tier=Tier.BUBBLEWRAP, available=False, reason="bwrap not installed (apt-get install bubblewrap)"
        )
    # As root, bwrap is started under a uid of its own (RLIMIT_NPROC does not bind root), so the
    # trial must use an unprivileged user namespace exactly as the real runs will.
    uid = allocate_uid() if running_as_root() else None
    as_uid, ids = uid_switch(uid)
    try:
        done = subprocess.run(
            [*as_uid, exe, *_BWRAP_CHECK, *root_layout(), PYTHON, "-I", "-S", "-c", "pass"],
            capture_output=True, timeout=10, cwd="/", check=False, **ids,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return TierStatus(tier=Tier.BUBBLEWRAP, available=False, reason=f"bwrap failed to run: {exc}")
    finally:
        release_uid(uid)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()[:300]
        return TierStatus(
            tier=Tier.BUBBLEWRAP,
            available=False,
            reason=f"bwrap cannot create namespaces here (user namespaces refused?): {why}",
        )
    version = subprocess.run([exe, "--version"], capture_output=True, check=False, timeout=10)
    found = version.stdout.decode(errors="replace").strip() or "bwrap"
    return TierStatus(tier=Tier.BUBBLEWRAP, available=True, reason=f"{found}, user namespaces work")


def _probe_landlock(abi: int) -> TierStatus:
    problem = _python_problem() or _seccomp_problem()
    if problem:
        return TierStatus(tier=Tier.LANDLOCK, available=False, reason=problem)
    if abi == 0:
        return TierStatus(
            tier=Tier.LANDLOCK, available=False, reason="Landlock is not enabled in this kernel"
        )
    if abi < 6 and not running_as_root():
        # Without the signal scope (ABI 6, Linux 6.12) a job could signal the caller's other
        # processes, and the worker could not reap a job's stragglers without reaching them too.
        return TierStatus(
            tier=Tier.LANDLOCK,
            available=False,
            reason=f"Landlock ABI {abi} < 6 has no signal scoping, needed when not run as root",
        )
    how = "signal scope" if abi >= 6 else "a uid of its own per job"
    return TierStatus(tier=Tier.LANDLOCK, available=True, reason=f"Landlock ABI {abi}; {how}")


@cache
def probe_tiers() -> ProbeReport:
    """Probe once per process: try bubblewrap, read the Landlock ABI, check the seccomp table."""
    from retryctl.sandbox._inside_os import landlock_abi

    abi = landlock_abi()
    unsafe = TierStatus(
        tier=Tier.UNSAFE, available=True, reason="rlimits only: isolates nothing (needs unsafe=True)"
    )
    return ProbeReport(tiers=(_probe_bwrap(), _probe_landlock(abi), unsafe), landlock_abi=abi)


def detect_tier(*, unsafe: bool = False) -> Tier:
    """The tier :func:`~retryctl.sandbox.run_code` would use here."""
    return probe_tiers().best(unsafe=unsafe)
