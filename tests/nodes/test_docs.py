"""Every ```python block of docs/langgraph.md runs as written, offline, in a fresh directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "langgraph.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


class TestLangGraphDoc:
    def test_has_the_three_examples(self) -> None:
        assert len(BLOCKS) == 3

    @pytest.mark.parametrize("code", BLOCKS, ids=["embedded-node", "react-tool-node", "ask-and-resume"])
    def test_block_runs(self, code: str, tmp_path: Path) -> None:
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
