"""Every ```python block of docs/*.md runs as written, alone, in a fresh directory (tests/_doc_blocks.py).

A block that reads ``RETRYCTL_REDIS_URL`` or ``RETRYCTL_POSTGRES_URL`` needs that server (``make
services`` starts both): it gets the URL the suite's fixture reached, and skips when the server is
unreachable, except under ``CI``, where it fails (tests/conftest.py). A ```python fragment block is
only compiled.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from retryctl.cli import app
from tests._doc_blocks import Block, compile_fragment, python_blocks, run_block

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCKS = [block for page in sorted(DOCS.glob("*.md")) for block in python_blocks(page)]
SERVICES = {"RETRYCTL_REDIS_URL": "redis_url", "RETRYCTL_POSTGRES_URL": "postgres_url"}
"""The environment variable a block reads a server's URL from → the fixture that reaches that server."""


def _id(block: Block) -> str:
    return f"{block.path.stem}:{block.line}"


class TestDocBlocks:
    def test_the_docs_have_python_examples(self) -> None:
        assert len(BLOCKS) >= 13, [_id(b) for b in BLOCKS]

    @pytest.mark.parametrize("block", BLOCKS, ids=_id)
    def test_block_runs_as_written(
        self, block: Block, tmp_path: Path, request: pytest.FixtureRequest
    ) -> None:
        if block.fragment:  # marked ```python fragment: only compiled
            compile_fragment(block)
            return
        env = {
            var: request.getfixturevalue(fixture) for var, fixture in SERVICES.items() if var in block.code
        }
        run_block(block, tmp_path, env=env)


class TestPythonBlocks:
    def test_finds_blocks_lines_and_fragments(self, tmp_path: Path) -> None:
        page = tmp_path / "page.md"
        page.write_text(
            "# t\n\n```python\nprint(1)\n```\n\n```sh\nls\n```\n\n"
            "- item\n\n  ```python fragment\n  await x\n  ```\n",
            encoding="utf-8",
        )
        blocks = python_blocks(page)
        assert [(b.line, b.code, b.fragment) for b in blocks] == [
            (3, "print(1)\n", False),
            (13, "await x\n", True),
        ]
        compile_fragment(blocks[1])

    def test_an_unknown_word_on_a_fence_is_an_error_naming_the_line(self, tmp_path: Path) -> None:
        page = tmp_path / "page.md"
        page.write_text("x\n```python fragmnet\nprint(1)\n```\n", encoding="utf-8")
        with pytest.raises(ValueError, match=r"page\.md:2: unknown fence '```python fragmnet'"):
            python_blocks(page)

    def test_a_fragment_that_is_not_python_names_its_line(self, tmp_path: Path) -> None:
        page = tmp_path / "page.md"
        page.write_text("```python fragment\ndef f(:\n```\n", encoding="utf-8")
        with pytest.raises(SyntaxError):
            compile_fragment(python_blocks(page)[0])

    def test_a_failing_block_shows_its_place_and_output(self, tmp_path: Path) -> None:
        page = tmp_path / "page.md"
        page.write_text("```python\nimport sys\nprint('so far')\nsys.exit(3)\n```\n", encoding="utf-8")
        with pytest.raises(AssertionError, match=r"(?s)page\.md:1 exited 3.*so far"):
            run_block(python_blocks(page)[0], tmp_path)


def _help(command: str) -> str:
    # Wide, so that rich does not break a path across lines.
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.output


class TestHelpPages:
    @pytest.mark.parametrize("command", sorted(c.name or "" for c in app.registered_commands))
    def test_every_page_a_help_names_exists(self, command: str) -> None:
        pages = re.findall(r"[\w./-]+\.md\b", _help(command))
        assert [page for page in pages if not (ROOT / page).is_file()] == []

    def test_bench_names_the_page_with_the_bank_format(self) -> None:
        assert "docs/stopping.md" in _help("bench")
        assert '"samples"' in (DOCS / "stopping.md").read_text(encoding="utf-8")
