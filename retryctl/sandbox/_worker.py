"""The host's handle on one warm worker: start it in its tier, send jobs, read capped answers, stop it."""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import signal
import struct
import subprocess
import tempfile
import time
from typing import Any, BinaryIO

from retryctl.sandbox._errors import SandboxError
from retryctl.sandbox._inside_worker import ANSWER, KIND_ERROR, KIND_JOB, KIND_READY, remove_tree
from retryctl.sandbox._launch import (
    DEVICE_PATHS,
    PYTHON,
    SANDBOX_ENV,
    SYSTEM_READ_PATHS,
    allocate_uid,
    bwrap_argv,
    inside_program,
    kill_all_is_scoped,
    python_argv,
    release_uid,
    running_as_root,
    uid_switch,
)
from retryctl.sandbox._result import SandboxLimits, Tier
from retryctl.sandbox._seccomp import base_filter, guard_filter, syscall_nr

__all__ = ["WorkerProcess", "count_processes", "wait_exit"]

_MAX_ERROR = 4096
_START_S = 30.0
_KILLED_BY = (None, "timeout", "disk_quota")
_GRACE_S = 5.0
"""How long past a job's own timeout the host waits before it declares the worker hung."""


def _work_parent() -> str | None:
    """Where Landlock-tier workers keep their jobs' dirs: ``/dev/shm`` (a tmpfs, like bubblewrap's
    ``/work``, ~0.8 ms faster per job than a disk) when usable, else the system temp dir. Either way
    the worker polls the job's usage against ``disk_mb`` and ``max_files``."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def wait_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``proc`` to exit and reap it; False if it is still running.

    ``Popen.wait(timeout)`` polls with sleeps that double up to 50 ms, which would add ~15 ms to a
    12 ms sandbox; a pidfd wakes the moment the process exits.
    """
    try:
        pidfd = os.pidfd_open(proc.pid)
    except ProcessLookupError:  # already reaped
        proc.wait()
        return True
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(max(timeout_s, 0) * 1000):
            return False
    finally:
        os.close(pidfd)
    proc.wait()
    return True


def count_processes(uid: int) -> int:
    """How many processes ``uid`` has now: RLIMIT_NPROC counts them all, so a job's limit sits on top."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                continue
    return count


def kill_uid(uid: int) -> None:
    """As root: SIGKILL every process of a job uid (the backstop when a worker stops answering)."""
    subprocess.run(
        [PYTHON, "-I", "-S", "-c", "import os\ntry: os.kill(-1, 9)\nexcept OSError: pass"],
        user=uid, group=uid, extra_groups=[], cwd="/", timeout=10, check=False,
    )  # fmt: skip


class WorkerProcess:
    """One warm worker in ``tier``. Not thread-safe: the pool hands it to one caller at a time."""

    def __init__(
        self, tier: Tier, limits: SandboxLimits, landlock_abi: int, *, one_shot: bool = False
    ) -> None:
        self.one_shot = one_shot
        """Exit after the first job (a cold ``run_code``) instead of preparing the next one."""
        self.tier = tier
        self.limits = limits
        self.landlock_abi = landlock_abi
        self.jobs = 0
        self.uid: int | None = None
        self._root: str | None = None
        self._ready_pending = False
        self._parent_fd = -1
        """The number the worker's pidfd of this process has in the worker (-1: none)."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: BinaryIO | None = None

    @property
    def alive(self) -> bool:
        """The worker process is running."""
        return self._proc is not None and self._proc.poll() is None

    def _config(self, root: str) -> dict[str, Any]:
        guard = guard_filter()
        bwrap = self.tier is Tier.BUBBLEWRAP
        confined = self.tier is not Tier.UNSAFE
        uid_procs = 0 if self.uid is not None or bwrap else count_processes(os.getuid())
        wire = self.limits.as_wire()
        return {
            "root": root,
            # Each job's own tmpfs (where user namespaces work) has the pool's size and inode cap.
            "isolate": confined,
            "clone_nr": syscall_nr("clone"),
            "pivot_nr": syscall_nr("pivot_root"),
            "disk_bytes": wire["disk_bytes"],
            "max_files": wire["max_files"],
            "seccomp": base_filter() if confined else None,
            "guard": (guard.program, list(guard.pid_offsets), list(guard.neg_pid_offsets))
            if confined
            else None,
            "landlock_abi": self.landlock_abi if confined else 0,
            "worker_domain": self.tier is Tier.LANDLOCK,
            "read_paths": SYSTEM_READ_PATHS,
            "device_paths": DEVICE_PATHS,
            # Without namespaces of its own the job shares RLIMIT_NPROC with the worker (and bwrap's
            # pid 1).
            "nproc_base": uid_procs + (3 if bwrap else 2),
            "scoped_kill": kill_all_is_scoped(self.tier),
            "one_shot": self.one_shot,
            # Outside bubblewrap (whose --die-with-parent does it) the worker dies with this process:
            # else a job would run on, unsupervised by any caller, until its own timeout. A pidfd
            # of this process (-1: none), not its pid: no job forked from the worker can find it.
            "parent_fd": self._parent_fd,
        }

    def start(self) -> None:
        """Spawn the worker and wait for it to report ready; :class:`SandboxError` if it does not.
        Starting again replaces the process."""
        self.close()
        self.jobs = 0
        if running_as_root():
            self.uid = allocate_uid()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        as_uid, ids = uid_switch(self.uid)
        if self.tier is Tier.BUBBLEWRAP:
            root, cwd = "/work", "/"
            # The worker's /work holds the jobs' output files, each at most max_output_bytes (and,
            # without namespaces, the jobs' dirs).
            out = 2 * self.limits.max_output_bytes + (1 << 20)
            argv = bwrap_argv(mode="worker", work_bytes=(self.limits.disk_mb << 20) + out)
        else:
            root = cwd = self._root = self._host_root()
            argv = python_argv("worker")
        parent_fd = self._parent_fd = -1 if self.tier is Tier.BUBBLEWRAP else os.pidfd_open(os.getpid())
        try:
            self._proc = subprocess.Popen(
                as_uid + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                env=dict(SANDBOX_ENV), cwd=cwd, start_new_session=True,
                pass_fds=(parent_fd,) if parent_fd >= 0 else (), **ids,
            )  # fmt: skip
        except OSError as exc:
            raise SandboxError(tier=self.tier.value, problem=f"cannot start worker: {exc}") from exc
        finally:
            if parent_fd >= 0:
                os.close(parent_fd)
        self._send(self._config(root), prefix=inside_program("worker")[1])
        self._ready_pending = True
        if not self.one_shot:  # a cold run sends its job at once and reads both answers after
            self._await_ready()

    def _host_root(self) -> str:
        """The worker's directory on the host. With a uid of its own the directory itself stays
        root's (mode 0o710, group the job's): the worker can enter it but no job can re-permission
        it, so nothing below is reachable by other host users whatever a job does to its own dirs."""
        root = tempfile.mkdtemp(prefix="retryctl-sandbox-", dir=_work_parent())
        if self.uid is not None:
            for sub in ("jobs", "out"):
                os.mkdir(f"{root}/{sub}", 0o700)
                os.chown(f"{root}/{sub}", self.uid, self.uid)
            os.chown(root, 0, self.uid)
            os.chmod(root, 0o710)
        return root

    def _await_ready(self) -> None:
        self._ready_pending = False
        kind = self._receive(time.monotonic() + _START_S, 0)[0]
        if kind != KIND_READY:
            self._fail(f"worker answered {kind} instead of ready")

    def run(self, code: str, files: dict[str, bytes], limits: SandboxLimits) -> dict[str, Any]:
        """Run one job; its exit code, ``killed_by``, and ``stdout``/``stderr`` within the caps."""
        self.jobs += 1
        wire = limits.as_wire()
        # Two frames: the limits, which the worker reads, and the job, which it passes on unread.
        self._send({"limits": wire})
        self._send({"code": code, "files": files, "limits": wire})
        if self._ready_pending:
            self._await_ready()
        kind, exit_code, killed, out_size, err_size, out, err = self._receive(
            time.monotonic() + limits.timeout_s + _GRACE_S, limits.max_output_bytes
        )
        if kind != KIND_JOB or killed >= len(_KILLED_BY):
            self._fail(f"unexpected answer kind {kind} / killed_by {killed}")
        return {
            "exit_code": exit_code,
            "killed_by": _KILLED_BY[killed],
            "stdout": out,
            "stderr": err,
            "stdout_size": out_size,
            "stderr_size": err_size,
        }

    def _send(self, message: dict[str, Any], prefix: bytes = b"") -> None:
        assert self._proc is not None and self._proc.stdin is not None
        blob = marshal.dumps(message, 4)
        try:
            self._proc.stdin.write(prefix + struct.pack(">I", len(blob)) + blob)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            self._fail(f"worker gone while sending ({exc})")

    def _receive(self, deadline: float, cap: int) -> tuple[int, int, int, int, int, bytes, bytes]:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        fields = struct.unpack(ANSWER, self._read(fd, struct.calcsize(ANSWER), deadline))
        kind, exit_code, killed, out_size, err_size, out_len, err_len = fields
        if kind == KIND_ERROR and out_len <= _MAX_ERROR:
            message = self._read(fd, out_len, deadline).decode(errors="replace")
            self._fail(f"worker setup failed: {message}")
        if out_len > cap or err_len > cap:
            self._fail(f"oversized answer ({out_len}, {err_len} bytes > {cap})")
        out, err = self._read(fd, out_len, deadline), self._read(fd, err_len, deadline)
        return kind, exit_code, killed, out_size, err_size, out, err

    def _read(self, fd: int, n: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while n:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                self._fail("worker stopped answering")
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                self._fail("worker exited")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _fail(self, problem: str) -> Any:
        stderr = b""
        if self._stderr is not None:
            self._stderr.seek(0)
            stderr = self._stderr.read(2000)
        self.close()
        detail = f"; its stderr: {stderr.decode(errors='replace').strip()}" if stderr.strip() else ""
        raise SandboxError(tier=self.tier.value, problem=problem + detail)

    def close(self) -> None:
        """Stop the worker (politely, then by force) and remove its files. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            if not wait_exit(proc, 2.0):
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # A worker that did not end cleanly may leave job processes behind; inside bwrap they
            # die with its pid namespace, elsewhere everything under its uid goes.
            if proc.returncode != 0 and self.uid is not None and self.tier is not Tier.BUBBLEWRAP:
                kill_uid(self.uid)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._root is not None:
            remove_tree(self._root)  # depth or modes a job left cannot stop it
            self._root = None
        if self.uid is not None:  # nothing runs under it any more: every path above waited
            release_uid(self.uid)
            self.uid = None
