"""How the host starts the in-sandbox program for each tier: argv, uid, mounts, paths."""

from __future__ import annotations

import importlib.util
import itertools
import marshal
import os
import shutil
import subprocess
import threading
from functools import cache
from pathlib import Path
from typing import Any

from retryctl.sandbox._inside_job import JOB_ENV
from retryctl.sandbox._result import Tier

__all__ = [
    "DEVICE_PATHS",
    "MASKED_PROC",
    "PYTHON",
    "SANDBOX_ENV",
    "SANDBOX_UID",
    "SYSTEM_READ_PATHS",
    "allocate_uid",
    "bwrap_argv",
    "bwrap_path",
    "inside_program",
    "inside_source",
    "kill_all_is_scoped",
    "python_argv",
    "release_uid",
    "root_layout",
    "running_as_root",
    "uid_switch",
]

PYTHON = "/usr/bin/python3"
"""The interpreter inside the sandbox: a system one, since a venv under /root or /home is hidden."""
SANDBOX_UID = 65534
"""The uid (and gid) a job sees inside bubblewrap: ``nobody``."""
SYSTEM_READ_PATHS = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/alternatives",
                     "/etc/ld.so.cache", "/etc/localtime"]  # fmt: skip
"""What a job may read and execute: the system, and not ``/etc`` as a whole, ``/home`` or ``/root``."""
SANDBOX_ENV = {"MALLOC_ARENA_MAX": "2"}
"""The in-sandbox interpreter's environment. glibc reserves 64 MiB of address space per malloc
arena (up to 8 per core): with RLIMIT_AS that would make a few threads look like a memory bomb."""
DEVICE_PATHS = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"]
"""Devices a Landlock-confined job may open."""
MASKED_PROC = ["/proc/locks", "/proc/keys", "/proc/key-users"]
"""Host-wide tables a pid namespace's ``/proc`` still shows (every file lock's device, inode and
offset; the caller's keys' descriptions; every uid's key counts): bubblewrap binds ``/dev/null``
over each (on its ``nodev`` bind, opening it fails). Each costs a bind and a remount (~0.1 ms) on
the cold path, so shared counters (``/proc/sys/fs/file-nr``) are left, with ``/proc/meminfo``, as
contention channels. The Landlock tier has no ``/proc`` at all."""

_HERE = Path(__file__).parent
# Root can give every job a uid of its own: RLIMIT_NPROC then counts that job only (root itself is
# exempt from it), and kill(-1) from that uid reaches that job only. High, unnamed uids are used.
_UID_BASE = 2_000_000_000  # + pid % 100000 * 1000 + slot stays below 2**31
_UID_SLOTS = 1000
_uid_counter = itertools.count()
_uid_lock = threading.Lock()
_uids_in_use: set[int] = set()


def running_as_root() -> bool:
    """Whether this process can switch to another uid."""
    return os.geteuid() == 0


def allocate_uid() -> int:
    """A uid no other live sandbox of this process uses (root only), spread over processes by pid.
    Give it back with :func:`release_uid`."""
    base = _UID_BASE + (os.getpid() % 100_000) * _UID_SLOTS
    with _uid_lock:
        for _ in range(_UID_SLOTS):
            uid = base + next(_uid_counter) % _UID_SLOTS
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid
    raise RuntimeError(f"more than {_UID_SLOTS} sandboxes alive at once in this process")


@cache
def _setpriv() -> str | None:
    # The system's own first: it runs as root.
    return "/usr/bin/setpriv" if os.access("/usr/bin/setpriv", os.X_OK) else shutil.which("setpriv")


def uid_switch(uid: int | None) -> tuple[list[str], dict[str, Any]]:
    """How to start a program under ``uid`` (and gid ``uid``, no supplementary groups): an argv prefix
    and ``Popen`` keyword arguments. ``Popen(user=...)`` makes Python ``fork`` the whole caller
    (~2 ms for a 40 MB process) where it would otherwise ``vfork``; util-linux's ``setpriv`` makes
    the same ``setresgid``/``setgroups([])``/``setresuid`` calls after a ``vfork`` (real, effective
    and saved ids all become ``uid``, so every capability is dropped), for ~1 ms less."""
    if uid is None:
        return [], {}
    setpriv = _setpriv()
    if setpriv is None:
        return [], {"user": uid, "group": uid, "extra_groups": []}
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"], {}


def release_uid(uid: int | None) -> None:
    """Return a uid from :func:`allocate_uid` once nothing runs under it any more."""
    if uid is not None:
        with _uid_lock:
            _uids_in_use.discard(uid)


@cache
def inside_source(mode: str) -> str:
    """The program text: the kernel calls (``_ctypes``, ~0.6 ms to import: the direct mode needs them
    too, for its own namespaces, tmpfs and seccomp) and the job half; the worker adds its loop."""
    parts = ["_inside_os.py", "_inside_job.py"]
    if mode != "direct":
        parts.append("_inside_worker.py")
    text = "\n".join((_HERE / part).read_text() for part in parts)
    return f"{text}\n{mode}_main()\n"


# Reads a marshalled code object (length-prefixed) from stdin and runs it: the host compiles the
# program once instead of every sandbox compiling it at start-up (~2 ms for the worker).
_BOOTSTRAP = """import marshal, posix
def _read(n):
    data = b""
    while len(data) < n:
        chunk = posix.read(0, n - len(data))
        if not chunk:
            raise SystemExit(125)
        data += chunk
    return data
exec(marshal.loads(_read(int.from_bytes(_read(4), "big"))))
"""


@cache
def _same_bytecode() -> bool:
    """Whether the sandbox's interpreter runs this interpreter's bytecode (same magic number)."""
    try:
        done = subprocess.run(
            [PYTHON, "-I", "-S", "-c", "import importlib.util as u; print(u.MAGIC_NUMBER.hex())"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.strip() == importlib.util.MAGIC_NUMBER.hex()


@cache
def inside_program(mode: str) -> tuple[str, bytes]:
    """The ``python3 -c`` text for ``mode`` and the bytes to write to its stdin before anything
    else: a small loader and the compiled program when the bytecode matches, else the source."""
    source = inside_source(mode)
    if not _same_bytecode():
        return source, b""
    blob = marshal.dumps(compile(source, f"<retryctl-sandbox-{mode}>", "exec"))
    return _BOOTSTRAP, len(blob).to_bytes(4, "big") + blob


@cache
def bwrap_path() -> str:
    """bwrap as found on the caller's PATH (the sandbox is spawned with an empty environment)."""
    return shutil.which("bwrap") or "/usr/bin/bwrap"


def root_layout() -> list[str]:
    """Bind the system read-only, re-creating the merged-/usr symlinks (/lib -> usr/lib) as such."""
    args = ["--ro-bind", "/usr", "/usr"]
    for path in ("/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ("/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime"):
        args += ["--ro-bind-try", path, path]
    return args


def bwrap_argv(*, mode: str, work_bytes: int, info_fd: int | None = None) -> list[str]:
    """bubblewrap with every namespace (no network, not even the host's loopback), a read-only root
    and system, one writable size-limited tmpfs at ``/work`` (no ``/tmp``, no writable ``/dev``: an
    unsized tmpfs would let a job fill the host's memory), four device nodes, all capabilities
    dropped, an empty environment, a new session (no terminal injection) and death with its parent.
    The in-sandbox program installs the seccomp program itself, once it has made the namespaces and
    tmpfs of its own that the program then forbids. A direct job runs as pid 1 (``--as-pid-1``):
    no bwrap init shares its namespace for it to write to or escape through.
    Write ``inside_program(mode)[1]`` to its stdin first."""
    devices: list[str] = []
    for dev in DEVICE_PATHS:
        devices += ["--dev-bind", dev, dev]
    info = ["--info-fd", str(info_fd)] if info_fd is not None else []
    # A direct job runs in the interpreter bwrap starts, so bwrap sets the job's environment; a warm
    # worker sets each job's itself (its HOME is the job's own work dir).
    direct = mode == "direct"
    env = dict(JOB_ENV, HOME="/work", TMPDIR="/work") if direct else dict(SANDBOX_ENV, PATH="/usr/bin:/bin")
    return [
        bwrap_path(),
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",
        *(["--as-pid-1"] if direct else []),
        "--cap-drop", "ALL",
        "--clearenv",
        *[arg for key, value in env.items() for arg in ("--setenv", key, value)],
        "--hostname", "sandbox",
        *root_layout(),
        "--proc", "/proc",
        *[arg for path in MASKED_PROC for arg in ("--ro-bind-try", "/dev/null", path)],
        *devices,
        "--size", str(work_bytes), "--tmpfs", "/work",
        "--remount-ro", "/",
        "--chdir", "/work",
        "--uid", str(SANDBOX_UID),
        "--gid", str(SANDBOX_UID),
        *info,
        PYTHON, "-I", "-S", "-B", "-c", inside_program(mode)[0],
    ]  # fmt: skip


def python_argv(mode: str) -> list[str]:
    """The in-sandbox program started directly (Landlock and unsafe tiers); write
    ``inside_program(mode)[1]`` to its stdin first."""
    return [PYTHON, "-I", "-S", "-B", "-c", inside_program(mode)[0]]


def kill_all_is_scoped(tier: Tier) -> bool:
    """Whether the worker's ``kill(-1)`` is confined to its jobs (see ``_inside_worker``): always inside
    bubblewrap's pid namespace and the Landlock tier; in the unsafe tier only with a uid of its own."""
    return tier is not Tier.UNSAFE or running_as_root()
