"""The job half of the in-sandbox program: framing, the job's files and rlimits, and running the
job's code. Runs under ``/usr/bin/python3 -I -S -B`` with no retryctl installed.

Its text is run by ``python3 -c`` (see ``_launch.inside_program``), so it uses the standard library
only and no ``from __future__``. After ``_inside_os.py`` (the kernel calls) it is the **direct** mode of
cold bubblewrap runs (:func:`direct_main`): one job, run in this very process; the spec arrives
marshalled on stdin; stdout and stderr are files the host opened; the spec's ``status_fd`` reports
``S`` once setup is done or ``E<reason>`` if it failed; stragglers die with bwrap's pid namespace.

Nothing here imports json, re, signal (enum) or traceback at start-up: each costs milliseconds of the
cold-start budget (traceback is imported only when a job raises). Under ``-S`` not even ``os`` is
loaded yet, and importing it costs ~1.4 ms, ``struct`` ~0.2 ms: the sandbox's programs use the
builtin ``posix`` module instead. (The job's own ``import os`` then builds ``os.environ`` from
``posix.environ``, which is the job's environment.)
"""

import builtins
import io
import marshal
import posix
import resource
import sys

# On the host (tests, type checks) these import; inside the sandbox _inside_os.py comes first in the
# same text instead. (contextlib.suppress would cost an import at every sandbox start-up.)
try:  # noqa: SIM105
    from retryctl.sandbox._inside_os import (
        CLONE_NEWNS,
        PR_SET_NO_NEW_PRIVS,
        PR_SET_THP_DISABLE,
        drop_capabilities,
        mount_tmpfs,
        own_user_namespace,
        prctl,
        private_mounts,
        read_only_devices,
        seccomp_install,
    )
except ImportError:  # pragma: no cover - the sandbox has no retryctl
    pass

# The file name ``python -c`` gives its code too. ``exec`` of the source str compiles it under this
# name; the builtin ``compile()`` would cost ~1 ms more on its first call in a process, because it
# builds every ``ast`` node type just to check whether its argument is an AST.
_SOURCE_NAME = "<string>"
JOB_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
           "MALLOC_ARENA_MAX": "2"}  # fmt: skip
"""The job's environment, plus ``HOME`` and ``TMPDIR`` set to its work dir."""


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = posix.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> dict:  # type: ignore[type-arg]
    """One marshalled dict from the host, or ``EOFError`` when the host closed the pipe."""
    length = int.from_bytes(_read_exact(fd, 4), "big")
    return marshal.loads(_read_exact(fd, length))  # type: ignore[no-any-return]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[posix.write(fd, view) :]


def write_files(root: str, files: dict) -> None:  # type: ignore[type-arg]
    """Write the job's files under ``root``. The host sends normalised relative paths; anything else
    (an absolute path, an empty, ``.`` or ``..`` component) is refused here too."""
    for rel, content in files.items():
        parts = rel.split("/")
        if rel.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"file path {rel!r} escapes the work dir or is not normalised")
        path = root
        for part in parts[:-1]:
            path += "/" + part
            try:  # noqa: SIM105 - contextlib would cost an import at every start-up
                posix.mkdir(path, 0o777)  # as os.makedirs: the umask applies
            except FileExistsError:
                pass
        with open(f"{root}/{rel}", "wb") as fh:
            fh.write(content.encode() if isinstance(content, str) else content)


def set_environ(env: dict) -> None:  # type: ignore[type-arg]
    """Make ``env`` the whole environment, without importing ``os``: the C environment (what child
    processes get) and ``posix.environ`` (what ``os.environ`` is built from when the job imports
    ``os``), and ``os.environ`` itself if something imported it already."""
    for key in list(posix.environ):
        posix.unsetenv(key)
    posix.environ.clear()
    for key, value in env.items():
        posix.putenv(key, value)
        posix.environ[key.encode()] = value.encode()
    loaded = sys.modules.get("os")
    if loaded is not None:
        loaded.environ.clear()
        loaded.environ.update(env)


def set_limits(limits: dict, nproc_base: int) -> None:  # type: ignore[type-arg]
    """Lower every rlimit for this process; an unprivileged process can never raise them again."""
    cpu = int(limits["timeout_s"]) + 2
    memory = limits["memory_mb"] << 20
    for res, value in (
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_FSIZE, limits["max_file_bytes"]),
        (resource.RLIMIT_NOFILE, limits["nofile"]),
        (resource.RLIMIT_NPROC, nproc_base + limits["nproc"]),
    ):
        resource.setrlimit(res, (value, value))


def exec_user_code(code: str, workdir: str, *, set_env: bool) -> int:
    """Run ``code`` as ``__main__`` the way ``python -c`` would; return its exit status.

    ``set_env``: replace the environment with :data:`JOB_ENV` first (a warm worker's child); false
    when the process was started with it (cold bubblewrap)."""
    if set_env:
        set_environ(dict(JOB_ENV, HOME=workdir, TMPDIR=workdir))
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), encoding="utf-8",  # noqa: SIM115
                                  errors="backslashreplace")  # fmt: skip
    sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), encoding="utf-8",  # noqa: SIM115
                                  errors="backslashreplace", line_buffering=True)  # fmt: skip
    sys.argv = ["-c"]
    sys.path.insert(0, workdir)
    status = 0
    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as stop:
        if stop.code is None:
            status = 0
        elif isinstance(stop.code, int):
            status = stop.code & 0xFF
        else:
            print(stop.code, file=sys.stderr)
            status = 1
    except BaseException as exc:
        try:
            _print_traceback(exc, code)
        except BaseException:
            posix.write(2, b"error while printing the traceback (out of memory?)\n")
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # the output limit was hit: what was written stays, the rest is lost
            status = status or 1
    return status


def _print_traceback(exc: BaseException, code: str) -> None:
    """The traceback from the job's own frames (this runner's frame is noise to whoever reads it),
    quoting the job's lines, which is what a model needs to fix its code."""
    import linecache
    import traceback

    linecache.cache[_SOURCE_NAME] = (len(code), None, code.splitlines(True), _SOURCE_NAME)
    tb = exc.__traceback__
    traceback.print_exception(type(exc), exc, tb.tb_next if tb is not None else None)


def direct_main() -> None:
    """Cold bubblewrap mode: this interpreter is pid 1 of bwrap's pid namespace (``--as-pid-1``: no
    other process shares it, and when it exits the kernel kills whatever it started). It enters a
    user and mount namespace of its own to mount a tmpfs of exactly ``disk_mb`` and ``max_files``
    inodes over ``/work``, drops the capabilities that gave it, installs the seccomp program,
    reports ``S`` on the status fd and runs the job in this process."""
    status_fd = 3
    files_error = None
    try:
        spec = read_frame(0)
        status_fd = spec["status_fd"]
        limits = spec["limits"]
        workdir = posix.getcwd()
        try:
            own_user_namespace(CLONE_NEWNS)
            private_mounts()
            mount_tmpfs(workdir, limits["disk_bytes"], limits["max_files"] + 2)
            posix.chdir(workdir)
            read_only_devices(spec["devices"])
        except OSError:  # nested user namespaces refused: bwrap's sized /work stays, inodes polled
            pass
        drop_capabilities()  # whatever of the above failed: none of what a namespace gave is kept
        try:
            write_files(workdir, spec["files"])
        except OSError as exc:  # e.g. the files alone exceed the disk quota: the job's failure
            files_error = exc
        devnull = posix.open("/dev/null", posix.O_RDONLY)
        posix.dup2(devnull, 0)
        posix.close(devnull)
        set_limits(limits, 1)
        # No transparent huge pages: one 4 KiB reference (a pipe's, a socket's) would pin 2 MiB that
        # RLIMIT_AS no longer counts once unmapped. Kept across fork and exec; seccomp locks it.
        prctl(PR_SET_THP_DISABLE, 1)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        seccomp_install(spec["seccomp"])
    except BaseException as exc:
        posix.write(status_fd, b"E" + repr(exc).encode()[:2000])
        posix._exit(125)
    posix.write(status_fd, b"S")
    posix.closerange(3, 1 << 16)  # the status pipe and anything else bwrap let through
    if files_error is not None:
        posix.write(2, f"sandbox: cannot write the job's files: {files_error}\n".encode())
        posix._exit(1)
    posix._exit(exec_user_code(spec["code"], workdir, set_env=False))
