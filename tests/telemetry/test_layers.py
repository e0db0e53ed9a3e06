"""Where ``retryctl.telemetry`` sits: beside the controller, below the drivers. It imports only its own
modules, ``retryctl._lazy`` and ``retryctl.exceptions`` (the ``ConfigError`` of a wrong ``tracer_provider``;
the controller's types under ``TYPE_CHECKING`` alone), nothing below it
imports it, and it never imports the SDK: the application brings that."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_layers import PACKAGE, _file_imports

TELEMETRY = sorted((PACKAGE / "telemetry").glob("*.py"))
BELOW = sorted(
    p for layer in ("controller", "models", "sandbox", "audit") for p in (PACKAGE / layer).rglob("*.py")
)


def _runtime_imports(path: Path) -> set[str]:
    """The retryctl modules ``path`` imports outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
        for stmt in block.body
        for node in ast.walk(stmt)
    }
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and id(node) not in guarded
            and (node.module or "").startswith("retryctl")
        ):
            found.add(node.module or "")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("retryctl"))
    return found


class TestTelemetryLayer:
    @pytest.mark.parametrize("path", TELEMETRY, ids=lambda p: p.name)
    def test_it_imports_only_itself_at_run_time(self, path: Path) -> None:
        outside = {m for m in _runtime_imports(path) if not m.startswith("retryctl.telemetry")}
        assert outside <= {"retryctl._lazy", "retryctl.exceptions"}, f"{path.name} imports {sorted(outside)}"

    @pytest.mark.parametrize("path", BELOW, ids=lambda p: str(p.relative_to(PACKAGE)))
    def test_the_layers_below_do_not_import_it(self, path: Path) -> None:
        bad = [
            f"line {line}: {name}"
            for line, name in _file_imports(path)
            if name.startswith("retryctl.telemetry")
        ]
        assert not bad, f"{path.relative_to(PACKAGE.parent)} imports the telemetry ({'; '.join(bad)})"

    def test_retryctl_never_imports_the_sdk(self) -> None:
        # (LangSmith, under langchain.agents, imports it when installed: that is not retryctl's doing.)
        found = [
            f"{p.relative_to(PACKAGE.parent)} line {line}"
            for p in sorted(PACKAGE.rglob("*.py"))
            for line, name in _file_imports(p)
            if name.startswith("opentelemetry.sdk")
        ]
        assert found == []

    def test_importing_it_loads_the_api_alone(self) -> None:
        code = (
            "import sys, retryctl.telemetry, retryctl.telemetry._tracing; "
            "print('opentelemetry.trace' in sys.modules, "
            "any(m.startswith('opentelemetry.sdk') for m in sys.modules))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["True", "False"]
