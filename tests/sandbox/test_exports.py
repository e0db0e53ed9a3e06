"""The public names of retryctl.sandbox are pinned."""

from __future__ import annotations

import retryctl.sandbox


class TestExports:
    def test_sandbox_exports(self):
        assert sorted(retryctl.sandbox.__all__) == [
            "ExecResult", "ProbeReport", "Sandbox", "SandboxError", "SandboxLimits",
            "SandboxUnavailable", "Tier", "TierStatus", "detect_tier", "probe_tiers", "run_code",
        ]  # fmt: skip
        for name in retryctl.sandbox.__all__:
            assert getattr(retryctl.sandbox, name) is not None
