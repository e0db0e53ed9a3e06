"""``run_code``: one job in a fresh sandbox, and the tier resolution shared with the pool."""

from __future__ import annotations

import contextlib
import marshal
import os
import re
import select
import signal
import struct
import subprocess
import time
from typing import Any

from retryctl.exceptions import ConfigError
from retryctl.sandbox._drain import CappedPipe
from retryctl.sandbox._errors import SandboxError, SandboxUnavailable
from retryctl.sandbox._inside_worker import tmpfs_over
from retryctl.sandbox._job import (
    FilesArg,
    check_code,
    check_files,
    check_files_fit,
    job_limits,
    make_result,
)
from retryctl.sandbox._launch import (
    DEVICE_PATHS,
    allocate_uid,
    bwrap_argv,
    inside_program,
    release_uid,
    running_as_root,
    uid_switch,
)
from retryctl.sandbox._probe import probe_tiers
from retryctl.sandbox._result import ExecResult, SandboxLimits, Tier
from retryctl.sandbox._seccomp import base_filter
from retryctl.sandbox._worker import WorkerProcess

__all__ = ["resolve_tier", "run_code"]

_STATUS_MAX = 4096
_TEARDOWN_MS = 5000
_WATCH_S = 0.05
_CHILD_PID = re.compile(rb'"child-pid"\s*:\s*(\d+)')


def resolve_tier(tier: Tier | str | None, *, unsafe: bool) -> Tier:
    """The tier to use: the probe's best when ``tier`` is None, else ``tier`` if this machine can run it.

    The unsafe tier needs ``unsafe=True`` however it is reached; a tier the probe found unusable
    raises :class:`SandboxUnavailable` with the probe's reason.
    """
    report = probe_tiers()
    if tier is None:
        return report.best(unsafe=unsafe)
    try:
        wanted = Tier(tier)
    except ValueError:
        raise ConfigError(
            field="tier", value=tier, problem=f"must be one of {[t.value for t in Tier]}"
        ) from None
    if wanted is Tier.UNSAFE and not unsafe:
        raise ConfigError(
            field="tier", value=tier, problem="the unsafe tier isolates nothing; pass unsafe=True"
        )
    status = report.status(wanted)
    if not status.available:
        raise SandboxUnavailable(wanted=wanted.value, reasons={wanted.value: status.reason})
    return wanted


def run_code(
    code: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    files: FilesArg = None,
    tier: Tier | str | None = None,
    unsafe: bool = False,
    limits: SandboxLimits | None = None,
) -> ExecResult:
    """Run Python ``code`` in a fresh sandbox and return what happened.

    ``files`` are written into the job's work dir (its cwd) first. The code's own failures (an
    exception, a non-zero exit, a timeout, a limit hit) come back in the :class:`ExecResult`; only a
    sandbox that cannot run raises (:class:`SandboxUnavailable`, :class:`SandboxError`). ``tier`` forces
    a tier (tests run each); ``limits`` sets the limits other than the two named here.
    """
    code = check_code(code)
    checked = check_files(files)
    lim = job_limits(limits, timeout_s=timeout_s, memory_mb=memory_mb)
    check_files_fit(checked, lim)
    chosen = resolve_tier(tier, unsafe=unsafe)
    started = time.perf_counter()
    if chosen is Tier.BUBBLEWRAP:
        fields = _run_direct(code, checked, lim)
    else:
        worker = WorkerProcess(chosen, lim, probe_tiers().landlock_abi, one_shot=True)
        try:
            worker.start()
            fields = worker.run(code, checked, lim)
        finally:
            worker.close()
    return make_result(tier=chosen, limits=lim, duration_ms=(time.perf_counter() - started) * 1000, **fields)


def _sandbox_init(info_r: int) -> tuple[int, int] | None:
    """The sandbox's pid 1 and a pidfd on it, from bwrap's ``--info-fd`` report (``None`` if gone)."""
    found = _CHILD_PID.search(os.read(info_r, 4096))
    if found is None:
        return None
    pid = int(found.group(1))
    try:
        return pid, os.pidfd_open(pid)
    except OSError:
        return None


def _watch(
    proc: subprocess.Popen[bytes],
    init: tuple[int, int] | None,
    limits: SandboxLimits,
    outs: list[CappedPipe],
    status_r: int,
) -> str | None:
    """Wait for bwrap to exit, reading the job's output pipes as they fill; ``"timeout"`` or
    ``"disk_quota"`` if the job must be killed first.

    The job's ``/work`` is a tmpfs the job mounted with exactly ``disk_mb`` and ``max_files + 2``
    inodes; every 50 ms the host reads its usage (one ``statvfs`` through ``/proc/<pid 1>/root``,
    which no directory mode or depth hides) and kills a job that filled its inodes. Only once the
    job reported its set-up done (``status_r`` readable): before bwrap's ``pivot_root`` that path
    is the host's own ``/work``, if it has one."""
    deadline = time.monotonic() + limits.timeout_s
    wire = limits.as_wire()
    work = f"/proc/{init[0]}/root/work" if init is not None else None
    try:
        pidfd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        proc.wait()
        return None
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        by_fd = {out.fd: out for out in outs}
        for fd in (*by_fd, status_r):
            poller.register(fd, select.POLLIN)
        checked = time.monotonic()
        set_up = False
        while True:
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                return "timeout"
            exited = False
            for fd, _ in poller.poll(min(left, _WATCH_S) * 1000):
                if fd == pidfd:
                    exited = True
                elif fd == status_r:
                    set_up = True
                    poller.unregister(fd)
                elif not by_fd[fd].pump():
                    poller.unregister(fd)
            if exited:
                proc.wait()
                return None
            if now - checked >= _WATCH_S:
                checked = now
                if set_up and work and tmpfs_over(work, int(wire["disk_bytes"]), int(wire["max_files"])):
                    if any(fd == pidfd for fd, _ in poller.poll(0)):  # it ended on its own meanwhile
                        proc.wait()
                        return None
                    return "disk_quota"
    finally:
        os.close(pidfd)


def _kill_init(init: tuple[int, int] | None) -> None:
    """SIGKILL the job's pid 1 through its pidfd, which takes its whole pid namespace with it. Killing
    bwrap alone is not enough: the job is in a session of its own, and its death signal (bwrap's
    ``--die-with-parent``) is a setting the job could clear if seccomp did not refuse it."""
    if init is not None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(init[1], signal.SIGKILL)


def _wait_namespace_gone(init: tuple[int, int] | None) -> None:
    """bwrap reports the job's exit before its pid 1 has finished killing the namespace; pid 1 exits
    only once every process in it is gone, so waiting on pid 1 means no straggler outlives the call.
    A pid 1 still running when bwrap is gone (bwrap killed at the timeout) is killed, and waited for."""
    if init is None:
        return
    try:
        poller = select.poll()
        poller.register(init[1], select.POLLIN)
        if not poller.poll(_TEARDOWN_MS):
            _kill_init(init)
            poller.poll(_TEARDOWN_MS)
    finally:
        os.close(init[1])


def _run_direct(code: str, files: dict[str, bytes], limits: SandboxLimits) -> dict[str, Any]:
    """Cold bubblewrap: one bwrap whose python runs the job itself; its pid namespace dies with it."""
    wire = limits.as_wire()
    status_r, status_w = os.pipe()
    uid = allocate_uid() if running_as_root() else None
    as_uid, ids = uid_switch(uid)
    info_r, info_w = os.pipe()
    argv = as_uid + bwrap_argv(mode="direct", work_bytes=int(wire["disk_bytes"]), info_fd=info_w)
    spec = marshal.dumps(
        {
            "code": code,
            "files": files,
            "limits": wire,
            "seccomp": base_filter(),
            "status_fd": status_w,
            "devices": DEVICE_PATHS,
        },
        4,
    )
    killed_by = None
    # The job's stdout and stderr are pipes read here as they fill (see _drain): nothing of the
    # caller's, and no file on the host's disk, is ever the job's to write, grow or re-flag.
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    keep, limit = limits.max_output_bytes, int(wire["max_file_bytes"])
    outs = [CappedPipe(out_r, keep=keep, limit=limit), CappedPipe(err_r, keep=keep, limit=limit)]
    try:
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=out_w, stderr=err_w, env={}, cwd="/",
                pass_fds=(status_w, info_w), start_new_session=True, **ids,
            )  # fmt: skip
        finally:
            for fd in (status_w, info_w, out_w, err_w):
                os.close(fd)
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # bwrap failed early: its stderr says why
            proc.stdin.write(inside_program("direct")[1] + struct.pack(">I", len(spec)) + spec)
            proc.stdin.close()
        init = _sandbox_init(info_r)
        killed_by = _watch(proc, init, limits, outs, status_r)
        if killed_by is not None:
            _kill_init(init)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        _wait_namespace_gone(init)
        for out in outs:  # every writer is gone with the namespace: what is left in the pipes
            out.finish()
        status = os.read(status_r, _STATUS_MAX)
    finally:
        for out in outs:
            out.close()
        os.close(status_r)
        os.close(info_r)
        release_uid(uid)
    if killed_by is None and not status.startswith(b"S"):
        why = status[1:] or bytes(outs[1].kept[:2000])
        raise SandboxError(tier="bubblewrap", problem=why.decode(errors="replace").strip())
    result: dict[str, Any] = {"killed_by": killed_by}
    for name, out in (("stdout", outs[0]), ("stderr", outs[1])):
        result[name] = bytes(out.kept)
        result[f"{name}_size"] = out.size
    code_ = proc.returncode
    # bwrap reports a child killed by signal N as 128+N; the worker tiers report -N.
    if killed_by is not None:
        code_ = -signal.SIGKILL
    elif 128 < code_ <= 128 + 64:
        code_ = 128 - code_
    result["exit_code"] = code_
    return result
