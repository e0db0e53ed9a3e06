"""Sandboxed code execution: ``run_code`` for one job, ``Sandbox`` for a warm pool.

Three tiers, probed once per process (:func:`probe_tiers`; ``retryctl doctor`` shows the report):
bubblewrap (all namespaces, seccomp, rlimits, per-job tmpfs) → Landlock + seccomp + rlimits and a uid
of its own where namespaces are refused → rlimits only, which isolates nothing and therefore runs only
with ``unsafe=True``. See ``docs/sandbox.md`` for the threat model.
"""

from retryctl.sandbox._errors import SandboxError, SandboxUnavailable
from retryctl.sandbox._pool import Sandbox
from retryctl.sandbox._probe import ProbeReport, TierStatus, detect_tier, probe_tiers
from retryctl.sandbox._result import ExecResult, SandboxLimits, Tier
from retryctl.sandbox._run import run_code

__all__ = [
    "ExecResult",
    "ProbeReport",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxUnavailable",
    "Tier",
    "TierStatus",
    "detect_tier",
    "probe_tiers",
    "run_code",
]
