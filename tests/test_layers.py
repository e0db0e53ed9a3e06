"""The layers' arrows point down: the batch turn (``retryctl._turn``) belongs to the drivers.

The controller, the models and the sandbox are used by every driver (the LangGraph step, the tool node,
the middleware, the batch runner); only a driver knows whether it runs in a batch, so only drivers give
the batch's turn up, at their own awaits.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import retryctl

PACKAGE = Path(retryctl.__file__).parent
LOWER_LAYERS = ("controller", "models", "sandbox")
TURN = "retryctl._turn"


def _module(path: Path) -> str:
    """The dotted name of a module file of the package."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if path.name == "__init__.py" else parts)


def _imports(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """Every module the ``source`` of ``module`` imports (relative imports resolved), with its line."""
    parts = module.split(".")
    package = parts if is_package else parts[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=module)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            # ``from retryctl import _turn`` names the module as an imported name.
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def _file_imports(path: Path) -> list[tuple[int, str]]:
    return _imports(path.read_text(encoding="utf-8"), _module(path), is_package=path.name == "__init__.py")


def _sources() -> list[Path]:
    return sorted(p for layer in LOWER_LAYERS for p in (PACKAGE / layer).rglob("*.py"))


class TestLayers:
    def test_the_lower_layers_exist(self) -> None:
        # Guards the test below against passing vacuously after a move.
        assert {p.relative_to(PACKAGE).parts[0] for p in _sources()} == set(LOWER_LAYERS)

    @pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
    def test_controller_models_and_sandbox_do_not_import_the_batch_turn(self, path: Path) -> None:
        bad = [f"line {line}: {name}" for line, name in _file_imports(path) if name == TURN]
        assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {TURN} ({'; '.join(bad)})"

    @pytest.mark.parametrize(
        "line",
        [
            "from retryctl._turn import yielded_turn",
            "import retryctl._turn",
            "from retryctl import _turn",
            "from .. import _turn",
            "from .._turn import yielded_turn",
        ],
    )
    def test_the_check_sees_each_way_of_importing_it(self, line: str) -> None:
        # The parser above must catch the import however it is spelt, or the test proves nothing.
        source = f"def f():\n    {line}\n"
        assert (2, TURN) in _imports(source, "retryctl.models._probe"), line
        assert (2, TURN) not in _imports(source.replace("_turn", "_tu"), "retryctl.models._probe")

    def test_importing_them_does_not_load_the_turn(self) -> None:
        # Catches an indirect import too (a lower layer importing a driver that imports the turn).
        code = (
            "import sys; import retryctl.controller, retryctl.models, retryctl.sandbox;"
            f"print({TURN!r} in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "False"
