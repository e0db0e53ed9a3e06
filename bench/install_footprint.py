"""Print what ``pip install retryctl`` (the core, no extras) costs: distributions, site-packages size, and
the time ``import retryctl.middleware`` takes, beside ``import langchain.agents`` alone.

    .venv/bin/python bench/install_footprint.py PROJECT [PROJECT ...] [--runs 7] [--json]

Each PROJECT (a checkout of retryctl, e.g. this one and an older commit's ``git archive``) is installed
in a fresh virtual environment in a temporary directory, with this interpreter's ``venv`` and pip
(pip's cache is used: the first run downloads, later ones do not). Distributions are counted as
``pip freeze`` counts them (pip, setuptools and wheel left out); the size is the bytes of the files
under site-packages (MiB). An import is timed inside a fresh interpreter (the statement alone, not the
interpreter's start), once to warm the bytecode and the page cache and then ``--runs`` times, the
projects' runs interleaved so that the machine's load falls on each alike; the median is printed. The
heavy modules a core import must not load (openai, scipy, numpy, aiohttp, starlette, uvicorn) are
listed when it does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

HEAVY = ("openai", "scipy", "numpy", "aiohttp", "starlette", "uvicorn")
IMPORTS = ("retryctl.middleware", "langchain.agents")
_PACKAGING = {"pip", "setuptools", "wheel"}
_COUNT = (
    "import importlib.metadata as m, json;"
    "names = {(d.metadata['Name'] or '').lower().replace('_', '-') for d in m.distributions()};"
    f"print(json.dumps(sorted(names - set({sorted(_PACKAGING)!r}) - {{''}})))"
)
_SITE = (
    "import sysconfig, json;"
    "print(json.dumps(sorted({sysconfig.get_path('purelib'), sysconfig.get_path('platlib')})))"
)


@dataclass
class Install:
    """One project installed in its own environment, and what was measured of it."""

    project: Path
    python: Path
    distributions: list[str] = field(default_factory=list)
    size_mib: float = 0.0
    times_s: dict[str, list[float]] = field(default_factory=dict)
    heavy: dict[str, list[str]] = field(default_factory=dict)


def _run(*args: str | Path, timeout: float = 1800) -> str:
    command = [str(a) for a in args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


def _tree_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):  # a file gone between the walk and the stat
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def install(project: Path, where: Path) -> Install:
    """A fresh environment under ``where`` with ``project`` installed (no extras), counted and sized."""
    env = where / "venv"
    python = env / "bin" / "python"
    marker = where / "installed-from"
    if marker.is_file() and marker.read_text() == str(project):
        print(f"  reusing {env} (--keep): {project} is installed there", file=sys.stderr)
    else:
        venv.EnvBuilder(with_pip=True, clear=True).create(env)
        started = time.monotonic()
        _run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", project)
        print(f"  installed {project} in {time.monotonic() - started:.0f} s", file=sys.stderr)
        marker.write_text(str(project))
    found = Install(project=project, python=python)
    found.distributions = json.loads(_run(python, "-I", "-c", _COUNT))
    sites = {Path(p) for p in json.loads(_run(python, "-I", "-c", _SITE))}
    found.size_mib = sum(_tree_bytes(p) for p in sites) / 2**20
    return found


def time_import(python: Path, module: str) -> tuple[float, list[str]]:
    """Seconds ``import module`` takes in a fresh interpreter, and the heavy modules it loaded."""
    code = (
        "import sys, time, json; t = time.perf_counter(); import " + module + "; t = time.perf_counter() - t;"
        f"print(json.dumps([t, sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})]))"
    )
    # -I: neither the working directory (a checkout's retryctl/) nor PYTHONPATH may shadow the install.
    seconds, heavy = json.loads(_run(python, "-I", "-c", code))
    return float(seconds), list(heavy)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("projects", nargs="+", type=Path, help="retryctl checkouts to install")
    parser.add_argument("--runs", type=int, default=7, help="timed imports of each module, after a warm-up")
    parser.add_argument("--json", action="store_true", help="also print one JSON object on the last line")
    parser.add_argument(
        "--keep", type=Path, help="make the environments here and keep them; a later run reuses them"
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    for project in args.projects:
        if not (project / "pyproject.toml").is_file():
            parser.error(f"{project}: no pyproject.toml (not a project to install)")
    with tempfile.TemporaryDirectory(prefix="retryctl-footprint-") as tmp:
        where = args.keep or Path(tmp)
        installs = [install(p.resolve(), where / str(i)) for i, p in enumerate(args.projects)]
        for found in installs:
            for module in IMPORTS:
                time_import(found.python, module)  # warm-up: bytecode written, files in the page cache
        for _ in range(args.runs):
            for found in installs:
                for module in IMPORTS:
                    seconds, heavy = time_import(found.python, module)
                    found.times_s.setdefault(module, []).append(seconds)
                    found.heavy[module] = heavy
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    report = []
    for found in installs:
        medians = {m: statistics.median(ts) for m, ts in found.times_s.items()}
        print(f"{found.project}: pip install (core, no extras)")
        print(f"  distributions: {len(found.distributions)}")
        print(f"  site-packages: {found.size_mib:.0f} MiB")
        for module in IMPORTS:
            heavy = found.heavy[module]
            loads = f"; loads {', '.join(heavy)}" if heavy else ""
            print(f"  import {module}: median {medians[module]:.2f} s of {args.runs}{loads}")
        report.append(
            {
                "project": str(found.project),
                "distributions": len(found.distributions),
                "site_packages_mib": round(found.size_mib, 1),
                "import_s": {m: round(s, 4) for m, s in medians.items()},
                "heavy_modules": found.heavy,
                "names": found.distributions,
            }
        )
    print(f"(load average {load:.1f} on {os.cpu_count()} CPUs while timing)")
    if args.json:
        print(json.dumps({"installs": report, "runs": args.runs, "load_average": load}))


if __name__ == "__main__":
    main()
