"""Every ```python block of the README runs as written, in a fresh directory, offline.

The blocks are found and run by tests/_doc_blocks.py, shared with tests/test_docs.py.
"""

import re
from pathlib import Path

import pytest

from tests._doc_blocks import compile_fragment, python_blocks, run_block

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = python_blocks(README)


def test_readme_has_python_examples():
    assert [b for b in BLOCKS if not b.fragment], "the README lost its python examples"


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(block, tmp_path):
    if block.fragment:
        compile_fragment(block)
    else:
        run_block(block, tmp_path)


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
