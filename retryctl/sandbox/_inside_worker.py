"""The warm-worker half of the in-sandbox program (sent after ``_inside_os.py`` and
``_inside_job.py``; standard library only, no ``from __future__``).

A worker reads a config frame, then one frame per job on stdin; it forks one child per job, confines
the child (rlimits, a per-job Landlock domain over its own work dir, a seccomp guard naming the
worker's pid), waits with a wall timeout, then SIGKILLs everything left with ``kill(-1)``: inside a
pid namespace, a Landlock signal scope or a uid of its own, that reaches the job's processes only.

It uses ``posix`` rather than ``os`` (see ``_inside_job``): a Landlock-tier cold run starts one
worker per call, and ``import os`` would add ~1.4 ms to each.

Frames: host → sandbox is a 4-byte big-endian length then ``marshal`` (the sandbox trusts the host);
sandbox → host is the fixed struct :data:`ANSWER` then the stdout and stderr bytes it announces (the
host trusts nothing it reads and checks every length).
"""

import gc
import marshal
import posix
import select
import struct
import time

# On the host (tests, type checks) these import; inside the sandbox the sources are concatenated
# instead. (contextlib.suppress would cost an import at every sandbox start-up.)
try:
    from retryctl.sandbox._inside_job import (
        _write_all,
        exec_user_code,
        read_frame,
        set_limits,
        write_files,
    )
    from retryctl.sandbox._inside_os import (
        PR_SET_CHILD_SUBREAPER,
        PR_SET_DUMPABLE,
        PR_SET_NO_NEW_PRIVS,
        PR_SET_PDEATHSIG,
        landlock_restrict,
        prctl,
        seccomp_install,
    )
except ImportError:  # pragma: no cover - the sandbox has no retryctl
    pass

ANSWER = ">BqBQQII"
"""kind (0 ready, 1 job, 2 error), exit code (or the worker's pid), killed_by (0 none, 1 timeout,
2 disk quota), stdout size, stderr size, then the lengths of the stdout and stderr bytes that follow."""
KIND_READY, KIND_JOB, KIND_ERROR = 0, 1, 2
KILLED_BY = {None: 0, "timeout": 1, "disk_quota": 2}
_SIGKILL = 9  # the same number on every Linux architecture; `import signal` would cost ~3 ms (enum)
_WATCH_S = 0.05


class Worker:
    """The warm worker's state: its config and job counter."""

    def __init__(self, cfg: dict) -> None:  # type: ignore[type-arg]
        self.cfg = cfg
        self.root = cfg["root"]
        self.jobs = 0
        self.next: tuple | None = None  # type: ignore[type-arg]
        """The pre-forked child waiting for the next job: (pid, work dir, job pipe)."""
        self.outs: list = []  # type: ignore[type-arg]
        self.scoped = bool(cfg["scoped_kill"])
        self.pid = posix.getpid()
        self.guard = None
        if cfg["guard"] is not None:
            program, pid_at, neg_at = cfg["guard"]
            patched = bytearray(program)
            for offset in pid_at:
                struct.pack_into("<I", patched, offset, self.pid)
            for offset in neg_at:
                struct.pack_into("<I", patched, offset, (-self.pid) & 0xFFFFFFFF)
            self.guard = bytes(patched)

    def setup(self) -> None:
        """Confine the worker itself: no core dumps of its memory, reaper of orphans, seccomp, and in
        the Landlock tier a domain of its own (which also scopes its ``kill(-1)`` to its jobs)."""
        prctl(PR_SET_DUMPABLE, 0)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        for path in (self.root + "/jobs", self.cfg["out_dir"]):  # their parents exist
            try:  # noqa: SIM105 - no contextlib import in the sandbox's start-up
                posix.mkdir(path, 0o700)
            except FileExistsError:
                pass
        self.outs = [
            posix.open(f"{self.cfg['out_dir']}/{n}", posix.O_RDWR | posix.O_CREAT | posix.O_CLOEXEC, 0o600)
            for n in ("stdout", "stderr")
        ]
        if self.cfg["seccomp"] is not None:
            seccomp_install(self.cfg["seccomp"])
        if self.cfg["worker_domain"]:
            landlock_restrict(self.cfg["landlock_abi"], read_paths=self.cfg["read_paths"],
                              write_paths=[self.root], device_paths=self.cfg["device_paths"])  # fmt: skip

    def prefork(self) -> None:
        """Fork and confine the next job's child ahead of its job, off the critical path: it waits
        on a pipe for the code and the limits. Called after each answer (and before the first job)."""
        if self.next is not None:
            return
        self.jobs += 1
        workdir = f"{self.root}/jobs/{self.jobs}"
        posix.mkdir(workdir, 0o700)
        read_end, write_end = posix.pipe()
        pid = posix.fork()
        if pid == 0:
            self._child(workdir, read_end)
        posix.close(read_end)
        self.next = (pid, workdir, write_end)

    def run(self, job: dict) -> tuple[dict, bytes, bytes]:  # type: ignore[type-arg]
        """Hand one job to the pre-forked child; return the header, stdout and stderr (capped)."""
        self.prefork()
        pid, workdir, job_pipe = self.next  # type: ignore[misc]
        self.next = None
        limits = job["limits"]
        for fd in self.outs:  # the same two files every job: cheaper than creating and unlinking
            posix.ftruncate(fd, 0)
            posix.lseek(fd, 0, 0)  # SEEK_SET
        header: dict = {"killed_by": None, "sizes": [0, 0]}  # type: ignore[type-arg]
        try:
            try:
                write_files(workdir, job["files"])
            except OSError as exc:  # e.g. the files alone exceed the disk quota
                header["exit_code"] = 1
                return header, b"", f"sandbox: cannot write the job's files: {exc}\n".encode()
            started = time.monotonic()
            blob = marshal.dumps({"code": job["code"], "limits": limits})
            try:  # noqa: SIM105 - no contextlib import in the sandbox's start-up
                _write_all(job_pipe, struct.pack(">I", len(blob)) + blob)
            except OSError:  # the child died before its job: its exit status says how
                pass
            posix.close(job_pipe)
            job_pipe = -1
            status = self._wait(pid, started + limits["timeout_s"], workdir, limits, header)
            header["exit_code"] = posix.waitstatus_to_exitcode(status)
            _kill_all(self.scoped, pid)
            header["sizes"] = [posix.fstat(fd).st_size for fd in self.outs]
            data = [posix.pread(fd, limits["max_output_bytes"], 0) for fd in self.outs]
            return header, data[0], data[1]
        finally:
            if job_pipe >= 0:
                posix.close(job_pipe)
            _kill_all(self.scoped, pid)
            _remove_tree(workdir)

    def _child(self, workdir: str, job_pipe: int) -> None:
        try:
            posix.setsid()
            prctl(PR_SET_PDEATHSIG, _SIGKILL)
            devnull = posix.open("/dev/null", posix.O_RDONLY)
            for target, fd in ((0, devnull), (1, self.outs[0]), (2, self.outs[1]), (3, job_pipe)):
                posix.dup2(fd, target)
            posix.closerange(4, 1 << 16)
            posix.chdir(workdir)
            if self.cfg["landlock_abi"]:
                landlock_restrict(self.cfg["landlock_abi"], read_paths=self.cfg["read_paths"],
                                  write_paths=[workdir], device_paths=self.cfg["device_paths"])  # fmt: skip
            if self.guard is not None:
                seccomp_install(self.guard)
            job = read_frame(3)
            posix.close(3)
            set_limits(job["limits"], self.cfg["nproc_base"])
        except EOFError:  # the worker is shutting down: there is no job
            posix._exit(0)
        except BaseException as exc:
            posix.write(2, b"sandbox setup failed: " + repr(exc).encode())
            posix._exit(125)
        posix._exit(exec_user_code(job["code"], workdir, set_env=True))

    def _wait(self, pid: int, deadline: float, workdir: str, limits: dict, header: dict) -> int:  # type: ignore[type-arg]
        pidfd = posix.pidfd_open(pid)
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            while True:
                left = deadline - time.monotonic()
                wait_s = min(left, _WATCH_S)
                if left <= 0 or not poller.poll(max(wait_s, 0) * 1000):
                    if left <= 0:
                        header["killed_by"] = "timeout"
                    elif usage_over(workdir, limits["disk_bytes"], limits["max_files"]):
                        header["killed_by"] = "disk_quota"
                    else:
                        continue
                    _signal_all(self.scoped, pid)
                return posix.waitpid(pid, 0)[1]
        finally:
            posix.close(pidfd)


def usage_over(root: str, max_bytes: int, max_entries: int) -> bool:
    """Whether the tree under ``root`` holds more than ``max_bytes`` of disk or ``max_entries``
    files and directories (a tmpfs's size bounds bytes, not inodes; a plain directory bounds
    neither). Stops scanning as soon as it knows."""
    total, entries, stack = 0, 0, [root]
    while stack:
        try:
            with posix.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    if total > max_bytes or entries > max_entries:
                        return True
        except OSError:
            continue
    return False


def _signal_all(scoped: bool, pgid: int) -> None:
    """SIGKILL every process this worker may signal when that is its jobs only (see the module
    docstring); otherwise (the unsafe tier without a uid of its own) only the job's process group."""
    try:
        if scoped:
            posix.kill(-1, _SIGKILL)
        elif pgid:
            posix.killpg(pgid, _SIGKILL)
    except OSError:
        pass


def _kill_all(scoped: bool, pgid: int) -> None:
    """:func:`_signal_all` and reap, until the worker has no child left (a process forked while the
    signal was being delivered is caught by the next round)."""
    for _ in range(2000 if scoped else 1):
        _signal_all(scoped, pgid)
        while True:
            try:
                pid, _ = posix.waitpid(-1, posix.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
        time.sleep(0.0005)


def _remove_tree(path: str) -> None:
    """Delete a job's work dir, however the job left it: iterative (a job can nest directories
    deeper than the recursion limit) and restoring permissions a job may have taken away."""
    try:  # the common case: the job left its work dir empty
        posix.rmdir(path)
        return
    except OSError:
        pass
    stack, dirs = [path], []
    while stack:
        current = stack.pop()
        dirs.append(current)
        try:
            posix.chmod(current, 0o700)
            with posix.scandir(current) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        posix.unlink(entry.path)
        except OSError:
            continue
    for current in reversed(dirs):
        try:  # noqa: SIM105
            posix.rmdir(current)
        except OSError:
            pass


def worker_main() -> None:
    """Warm mode: answer the config frame with a ready answer, then one answer per job frame."""
    try:
        worker = Worker(read_frame(0))
        worker.setup()
    except BaseException as exc:
        reply = repr(exc).encode()[:2000]
        _write_all(1, struct.pack(ANSWER, KIND_ERROR, 0, 0, 0, 0, len(reply), 0) + reply)
        posix._exit(125)
    # Every object alive now is shared copy-on-write with each job; keep the collector off them.
    gc.freeze()
    worker.prefork()
    _write_all(1, struct.pack(ANSWER, KIND_READY, worker.pid, 0, 0, 0, 0, 0))
    while True:
        try:
            job = read_frame(0)
        except EOFError:
            posix._exit(0)
        header, out, err = worker.run(job)
        answer = struct.pack(ANSWER, KIND_JOB, header["exit_code"], KILLED_BY[header["killed_by"]],
                             header["sizes"][0], header["sizes"][1], len(out), len(err))  # fmt: skip
        _write_all(1, answer + out + err)
        if worker.cfg["one_shot"]:  # a cold run: everything it started is already dead
            posix._exit(0)
        worker.prefork()
