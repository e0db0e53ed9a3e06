"""A lean core: ``pip install retryctl`` carries what the middleware, nodes, controller and audit need, and a
feature of an extra that is not installed says which extra, as :class:`MissingExtra` (an ImportError).

Each check runs in a fresh interpreter: what an import loads is only visible before anything else loaded
it. "Not installed" is simulated by an import hook that refuses the extra's modules, as an environment
without them would (``ModuleNotFoundError`` naming the module, and ``find_spec`` finding nothing).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from retryctl import _extras
from retryctl._extras import EXTRAS, missing_module, require_extra
from retryctl.exceptions import MissingExtra

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("openai", "scipy", "numpy", "aiohttp", "starlette", "uvicorn")
"""What the core's imports must not load: the gateway's, the calibration's and the OpenAI backend's."""

REFUSE = """
import importlib.abc, sys

class _Refuse(importlib.abc.MetaPathFinder):
    # As if not installed: the import and find_spec both fail for the refused packages.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Refuse())
"""


def run_python(
    code: str, *, refused: tuple[str, ...] = (), cwd: Path = ROOT, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter, with ``refused`` packages made uninstallable first."""
    prelude = f"REFUSED = {set(refused)!r}\n{REFUSE}" if refused else ""
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )


class TestCoreImports:
    @pytest.mark.parametrize(
        "module",
        [
            "retryctl.middleware",
            "retryctl.nodes",
            "retryctl.controller",
            "retryctl.audit",
            "retryctl.models",
            "retryctl.testing",
            "retryctl.agent",  # the demo's agent: `make demo` installs the core and `local` only
        ],
    )
    def test_importing_it_loads_no_heavy_module(self, module: str) -> None:
        done = run_python(
            f"import sys, {module}\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))"
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]", f"import {module} loaded {done.stdout.strip()}"

    def test_the_core_works_with_the_heavy_modules_uninstalled(self) -> None:
        # Not only not imported: not needed. A LangChain model's error is classified without openai.
        done = run_python(
            """
            import retryctl.middleware, retryctl.nodes, retryctl.audit
            from retryctl.models import LangChainBackend, ScriptedBackend
            from retryctl.models._langchain import _classify
            print(type(_classify(ConnectionError("reset"), "m")).__name__)
            """,
            refused=HEAVY,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "TransientBackendError"


class TestMissingExtra:
    @pytest.mark.parametrize(
        ("code", "refused", "feature", "extra"),
        [
            ("from retryctl.models import OpenAIBackend", ("openai",), "OpenAIBackend", "openai"),
            ("import retryctl.gateway", ("starlette",), "retryctl.gateway", "gateway"),
            ("import retryctl.gateway", ("aiohttp",), "retryctl.gateway", "gateway"),
            # The gateway's own upstream is an OpenAI backend: its extra is named, not openai's.
            ("from retryctl.gateway import create_app", ("openai",), "retryctl.gateway", "gateway"),
            (
                "from retryctl.evals import Outcome, fit_calibration\n"
                "fit_calibration([Outcome(raw=0.5, correct=True)])",
                ("scipy",),
                "fitting a calibration",
                "calibration",
            ),
            (
                "import asyncio\nfrom retryctl.batch import GraphJob, RayExecutor\n"
                "asyncio.run(RayExecutor().start(GraphJob(spec='tests.batch._graphs:build')))",
                ("ray",),
                "--ray (retryctl.batch.RayExecutor)",
                "ray",
            ),
        ],
        ids=[
            "openai-backend",
            "gateway-starlette",
            "gateway-aiohttp",
            "gateway-openai",
            "calibration-fit",
            "ray-executor",
        ],
    )
    def test_the_error_names_the_extra(self, code: str, refused: tuple[str, ...], feature: str, extra: str):
        done = run_python(
            f"""
            from retryctl.exceptions import MissingExtra
            try:
                {code.replace(chr(10), chr(10) + " " * 16)}
            except MissingExtra as exc:
                assert isinstance(exc, ImportError)
                print(exc.extra, exc.module, exc, sep="|")
            """,
            refused=refused,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == (
            f"{extra}|{refused[0]}|{feature} needs the {extra!r} extra: pip install 'retryctl[{extra}]'"
        )

    def test_ray_is_imported_only_when_a_ray_run_starts(self) -> None:
        # Every module of the --ray seam, and an executor made but not started, without ray itself.
        done = run_python(
            """
            import sys
            import retryctl.batch, retryctl.record, retryctl.evals._run
            import retryctl.cli._batch, retryctl.cli._eval, retryctl.cli._record, retryctl.cli._ray_option
            from retryctl.batch import RayExecutor
            RayExecutor(address="127.0.0.1:1")
            print("ray" in sys.modules)
            """
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "False"

    def test_a_calibration_file_is_read_and_applied_without_scipy(self, tmp_path: Path) -> None:
        # `retryctl eval --calibration FILE` and Policy(calibration=...) need only the core.
        from retryctl.evals import Outcome, fit_calibration, save_calibration

        path = tmp_path / "calibration.json"
        save_calibration(fit_calibration([Outcome(raw=r / 10, correct=r > 4) for r in range(10)]), path)
        done = run_python(
            f"""
            from retryctl.evals import load_calibration
            print(round(load_calibration({str(path)!r})(0.9, None), 3))
            """,
            refused=("scipy", "numpy"),
        )
        assert done.returncode == 0, done.stderr
        assert 0.5 < float(done.stdout) < 1.0

    def test_it_pickles_whole(self) -> None:
        import pickle

        error = MissingExtra(feature="retryctl serve", extra="gateway", module="starlette")
        back = pickle.loads(pickle.dumps(error))
        assert (type(back), str(back), back.module) == (MissingExtra, str(error), "starlette")


class TestRequireExtra:
    def test_every_extra_is_installed_here(self) -> None:
        # The dev install has every extra: the check must not see a missing one where there is none.
        assert {extra: missing_module(extra) for extra in EXTRAS} == dict.fromkeys(EXTRAS)

    def test_a_missing_module_is_named(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(_extras.EXTRAS, "gateway", ("json", "retryctl_no_such_module", "os"))
        assert missing_module("gateway") == "retryctl_no_such_module"
        with pytest.raises(MissingExtra, match=r"^retryctl serve needs the 'gateway' extra: pip install"):
            require_extra("gateway", feature="retryctl serve")

    def test_a_module_set_to_none_counts_as_missing(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "scipy", None)
        assert missing_module("calibration") == "scipy"


@pytest.fixture(scope="module")
def project() -> dict[str, object]:
    """pyproject.toml's ``[project]`` table."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        table: dict[str, object] = tomllib.load(file)["project"]
    return table


class TestPyproject:
    def test_the_extras_are_the_ones_the_code_names(self, project: dict[str, object]) -> None:
        optional = project["optional-dependencies"]
        assert isinstance(optional, dict)
        assert set(optional) - {"dev"} == set(EXTRAS)
        # `make test` installs dev: every extra's tests run there.
        dev_self = [r for r in optional["dev"] if r.startswith("retryctl[")]
        assert dev_self and set(dev_self[0].removeprefix("retryctl[").rstrip("]").split(",")) == set(EXTRAS)

    def test_the_core_needs_none_of_the_heavy_distributions(self, project: dict[str, object]) -> None:
        core = project["dependencies"]
        assert isinstance(core, list)
        names = {str(r).split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0] for r in core}
        heavy = {"openai", "scipy", "numpy", "aiohttp", "starlette", "uvicorn", "uvloop", "httptools"}
        assert names and not names & heavy
