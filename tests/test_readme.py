"""Every ```python block of the README runs as written, in a fresh directory, offline."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


def test_readme_has_python_examples():
    assert BLOCKS, "the README lost its python examples"


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(code, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"


def _guarantee_refs() -> list[str]:
    """Every ``tests/...`` reference in the Guarantees table, ``::Class`` shorthands expanded."""
    section = README.read_text(encoding="utf-8").split("## Guarantees", 1)[1].split("\n## ", 1)[0]
    refs: list[str] = []
    for row in section.splitlines():
        if not row.startswith("|"):
            continue
        last_file = ""
        for ref in re.findall(r"`((?:tests/[\w/]+\.py)?(?:::\w+)?)`", row.rsplit("|", 2)[-2]):
            if ref.startswith("tests/"):
                last_file = ref.split("::")[0]
                refs.append(ref)
            elif ref.startswith("::") and last_file:
                refs.append(last_file + ref)
    return refs


def test_every_guarantee_names_a_test_that_exists():
    refs = _guarantee_refs()
    assert len(refs) >= 8, refs
    root = README.parent
    for ref in refs:
        path, _, cls = ref.partition("::")
        source = (root / path).read_text(encoding="utf-8")
        assert "def test_" in source, f"{path} has no test"
        if cls:
            assert re.search(rf"^class {cls}\b", source, re.MULTILINE), f"{ref}: no such test class"
