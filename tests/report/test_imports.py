"""Imports run one way in ``retryctl``: no module imports, directly or through others, one that imports it.

The graph is read from the source with ``ast``, every import counted (at the top, inside a function,
under ``TYPE_CHECKING``: a deferred import still ties two modules together), so a circle that Python
tolerates because one side imports late is found too; the code before ``report/`` was reorganised
had one (``_analysis`` -> ``_split`` -> ``_analysis``, the second import inside a function). One kind
of edge is left out: a module's import of its own package (``retryctl.report._text`` ->
``retryctl.report``). Python runs the package's ``__init__`` before any of its modules anyway, and
the ``__init__`` files re-export their modules lazily (``_MODULES``), so that edge ties the module
to nothing else.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import retryctl

PACKAGE = Path(retryctl.__file__).parent


def _module(path: Path, root: Path) -> str:
    """The dotted name of a module file of the package at ``root``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if path.name == "__init__.py" else parts)


def _imported(source: str, module: str, *, is_package: bool) -> set[str]:
    """Every dotted name ``source`` (the module ``module``) imports, relative imports resolved; for
    ``from X import y`` both ``X`` and ``X.y`` (``y`` may be a module)."""
    parts = module.split(".")
    package = parts if is_package else parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=module)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of the package at ``root`` it imports (other names are dropped)."""
    files = {_module(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = _imported(path.read_text(encoding="utf-8"), name, is_package=path.name == "__init__.py")
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated at the end), or ``None``.

    An edge into a package's ``__init__`` from a module of that package does not count: importing
    ``retryctl.x`` runs ``retryctl/__init__`` first anyway, so ``retryctl.x._a -> retryctl.x`` is the
    package's own lazy re-export, not a dependency of ``_a`` on its siblings.
    """
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph, white)
    stack: list[str] = []

    def counts(src: str, dst: str) -> bool:
        return not src.startswith(dst + ".")

    def visit(node: str) -> list[str] | None:
        colour[node] = grey
        stack.append(node)
        for nxt in sorted(graph[node]):
            if not counts(node, nxt):
                continue
            if colour[nxt] == grey:
                return [*stack[stack.index(nxt) :], nxt]
            if colour[nxt] == white:
                found = visit(nxt)
                if found is not None:
                    return found
        stack.pop()
        colour[node] = black
        return None

    for start in sorted(graph):
        if colour[start] == white:
            found = visit(start)
            if found is not None:
                return found
    return None


class TestImportGraph:
    def test_the_graph_covers_the_package(self) -> None:
        # Guards the test below against passing vacuously: the graph has the modules and their edges.
        graph = import_graph()
        assert "retryctl.report._audit" in graph and "retryctl.audit._reader" in graph
        assert "retryctl.report._model" in graph["retryctl.report._scan"]
        assert "retryctl.audit" in graph["retryctl.report._audit"]  # its public chain check and settled size

    def test_no_import_circle_anywhere_in_retryctl(self) -> None:
        cycle = find_cycle(import_graph())
        assert cycle is None, "import circle: " + " -> ".join(cycle or [])

    def test_report_imports_run_one_way(self) -> None:
        # Within report/, the model imports nothing of the package, and no renderer is imported by the
        # modules that compute (they hand JSON values and an Analysis to the renderers, not back).
        graph = import_graph()
        report = {m: {t for t in ts if t.startswith("retryctl.report.")} for m, ts in graph.items()}
        assert report["retryctl.report._model"] == set()
        renderers = {f"retryctl.report.{m}" for m in ("_text", "_html", "_svg", "_story", "_diff")}
        computing = {f"retryctl.report.{m}" for m in ("_model", "_fold", "_scan", "_audit", "_summary")}
        assert not {t for m in computing for t in report[m]} & renderers

    @pytest.mark.parametrize(
        ("files", "cycle"),
        [
            ({"a": "from p import b\n", "b": "def f():\n    from p.a import x\n"}, ["p.a", "p.b", "p.a"]),
            ({"a": "from . import b\n", "b": "if TYPE_CHECKING:\n    import p.a\n"}, ["p.a", "p.b", "p.a"]),
            (
                {"a": "from .b import x\n", "b": "from .c import y\n", "c": "from ..p.a import z\n"},
                ["p.a", "p.b", "p.c", "p.a"],
            ),
            ({"a": "from .b import x\n", "b": "import os\n"}, None),
            # The package's lazy re-export: __init__ names a, and a imports from its own package.
            ({"__init__": "if TYPE_CHECKING:\n    from p.a import x\n", "a": "from p import y\n"}, None),
        ],
    )
    def test_the_check_finds_a_circle_however_it_is_spelt(
        self, tmp_path: Path, files: dict[str, str], cycle: list[str] | None
    ) -> None:
        # The parser and the search must catch a circle however its imports are spelt, or the test
        # above proves nothing.
        root = tmp_path / "p"
        root.mkdir()
        (root / "__init__.py").write_text("")
        for name, text in files.items():
            (root / f"{name}.py").write_text(text)
        assert find_cycle(import_graph(root)) == cycle
