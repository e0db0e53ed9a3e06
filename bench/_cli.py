"""The ``retryctl`` command as the benchmark scripts run it: this interpreter's, output captured."""

from __future__ import annotations

import subprocess
import sys

__all__ = ["retryctl"]


def retryctl(*args: str) -> str:
    """Run ``retryctl ARGS`` and return its standard output; exit naming the command if it fails."""
    done = subprocess.run(
        [sys.executable, "-m", "retryctl.cli", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"retryctl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout
