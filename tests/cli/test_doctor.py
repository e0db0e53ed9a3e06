"""``retryctl doctor``: the sandbox tier, the embedded model and versions, from the installed script."""

from __future__ import annotations

import importlib.util
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from retryctl.cli._doctor import PACKAGES
from retryctl.sandbox import probe_tiers

RETRYCTL = Path(sys.executable).parent / "retryctl"


class TestDoctor:
    @pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs the 'local' extra")
    def test_reports_tier_model_and_versions(self) -> None:
        proc = subprocess.run(
            [str(RETRYCTL), "doctor", "--threads", "1"],
            capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        out = proc.stdout
        assert "Traceback" not in out + proc.stderr
        # The tier it names is the one this machine's probe finds best (checked independently here).
        best = probe_tiers().best().value
        assert re.search(rf"^sandbox tier: {best}$", out, re.MULTILINE), out
        assert re.search(r"^sandbox job: print\(6 \* 7\) -> 42 in \d+ ms$", out, re.MULTILINE), out
        model = re.search(r"^model: embedded:SmolLM2\S* loads \([\d.]+s\); generated (\d+) tokens", out, re.M)
        assert model and int(model.group(1)) >= 1, out
        assert f"python: {platform.python_version()}" in out
        for name in PACKAGES:
            assert re.search(rf"^{re.escape(name)}: \S+", out, re.MULTILINE), name
        assert proc.returncode == 0, out
