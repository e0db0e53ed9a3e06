import ast
import subprocess
import sys
from pathlib import Path

import pytest


class TestControllerPurity:
    def test_importing_the_controller_loads_no_langgraph_or_openai(self):
        code = (
            "import sys, retryctl.controller, retryctl.controller.stopping;"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'langgraph', 'langchain_core', 'openai', 'llama_cpp'});"
            "print(','.join(bad))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == ""


# What doing I/O takes in Python: files and paths, processes, sockets and the network, databases,
# thread and process pools, and the clients of model servers. The controller may use time (a default
# clock for a ledger), threading locks (a ledger shared by threads) and asyncio (a breaker's async twins
# hand a blocking store to a thread), none of which reads or writes anything.
IO_MODULES = {
    "os", "io", "pathlib", "shutil", "tempfile", "glob", "mmap", "fcntl", "sqlite3", "dbm", "shelve",
    "socket", "ssl", "select", "selectors", "http", "urllib", "ftplib", "smtplib", "subprocess",
    "multiprocessing", "concurrent", "signal", "redis", "httpx", "httpx2", "requests", "aiohttp",
    "openai", "langgraph", "langchain_core", "langchain", "llama_cpp", "psycopg", "structlog", "logging",
}  # fmt: skip

CONTROLLER = Path(__file__).resolve().parents[2] / "retryctl" / "controller"


# Of retryctl itself the controller uses only its errors, answer equivalence (stdlib only, outside the
# package so that the audit can grade with it without importing the controller) and the library's
# logger (silent unless the user configures logging: docs/models.md#log-events), which tells of a
# breaker store's faults, and the cut-short check (stdlib only, outside the package so that the
# embedded decoder runs the very sums a replay does).
RETRYCTL_ALLOWED = (
    "retryctl.controller",
    "retryctl.exceptions",
    "retryctl._answers",
    "retryctl._log",
    "retryctl._cut",
)


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _top_level_imports(path: Path) -> list[tuple[int, str]]:
    return [(line, name.split(".")[0]) for line, name in _imports(path)]


class TestNoIO:
    @pytest.mark.parametrize("path", sorted(CONTROLLER.rglob("*.py")), ids=lambda p: p.name)
    def test_a_controller_module_imports_no_io_module(self, path: Path) -> None:
        bad = [f"line {line}: {name}" for line, name in _top_level_imports(path) if name in IO_MODULES]
        assert not bad, f"{path.name} imports I/O ({'; '.join(bad)}): it belongs in retryctl.runtime"

    @pytest.mark.parametrize("path", sorted(CONTROLLER.rglob("*.py")), ids=lambda p: p.name)
    def test_a_controller_module_imports_no_other_part_of_retryctl(self, path: Path) -> None:
        bad = [
            f"line {line}: {name}"
            for line, name in _imports(path)
            if name.split(".")[0] == "retryctl" and not name.startswith(RETRYCTL_ALLOWED)
        ]
        assert not bad, f"{path.name} imports outside the controller ({'; '.join(bad)})"

    def test_the_check_sees_imports_inside_functions(self, tmp_path: Path) -> None:
        # Lazy imports count too: the walk must find them, or the test above proves nothing.
        probe = tmp_path / "probe.py"
        probe.write_text("def f():\n    import sqlite3\n    from os import path\n")
        assert {name for _, name in _top_level_imports(probe)} == {"sqlite3", "os"}
