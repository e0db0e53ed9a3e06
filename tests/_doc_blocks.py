"""The ```python blocks of a Markdown page, and running one as a reader would: as written, alone.

A block opens with a line ```` ```python ```` (indented or not) and closes with ```` ``` ````. Every
block is a program that runs as written; the one exception is a block whose fence says
```` ```python fragment ````: a piece of a program (a signature listing, one line of a larger whole)
that is only compiled, never run. No other word may follow ``python``, so a typo cannot hide a block.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FRAGMENT", "Block", "compile_fragment", "python_blocks", "run_block"]

FRAGMENT = "fragment"
"""The word after ``python`` on a fence that marks the block as a fragment."""

_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```python(?P<info>[^\n`]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)


@dataclass(frozen=True)
class Block:
    """One ```python block of a page."""

    path: Path
    line: int
    """The line of its opening fence, 1-based."""
    code: str
    fragment: bool

    @property
    def where(self) -> str:
        """``docs/models.md:5``: the page (relative to the working directory when it can be) and line."""
        try:
            shown = self.path.relative_to(Path.cwd())
        except ValueError:
            shown = self.path
        return f"{shown}:{self.line}"


def python_blocks(path: Path) -> list[Block]:
    """Every ```python block of ``path``, in order. A fence with an unknown word is a ``ValueError``."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        words = match["info"].split()
        if words not in ([], [FRAGMENT]):
            raise ValueError(f"{path}:{line}: unknown fence '```python{match['info']}' (only '{FRAGMENT}')")
        code = textwrap.dedent(match["code"]) if match["indent"] else match["code"]
        blocks.append(Block(path=path, line=line, code=code, fragment=bool(words)))
    return blocks


def compile_fragment(block: Block) -> None:
    """A fragment must still be Python (top-level ``await`` allowed): a ``SyntaxError`` names its line."""
    compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def run_block(
    block: Block, cwd: Path, *, env: Mapping[str, str] | None = None, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``block`` with this interpreter in ``cwd`` (``python -c``); assert it exits 0, else show why."""
    done = subprocess.run(
        [sys.executable, "-c", block.code],
        check=False,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, (
        f"{block.where} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    return done
