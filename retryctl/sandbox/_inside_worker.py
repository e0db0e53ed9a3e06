"""The warm-worker half of the in-sandbox program (sent after ``_inside_os.py`` and
``_inside_job.py``; standard library only, no ``from __future__``).

A worker reads a config frame, then two frames per job on stdin: the job's limits (for itself) and
the job (code, files, limits), which it never reads: ``splice`` moves those bytes from its stdin to
the job's pipe inside the kernel, and ``sendfile`` moves the job's output to the host the same way.
So no job's code, files or output ever sits in the worker's memory, and a child forked from it for
the next job (the fork happens after each answer, off the critical path) cannot find them there.

Where user namespaces work, the worker enters user, mount, IPC and UTS namespaces of its own at
start-up (names the host ``sandbox``; in the Landlock tier it also pivots into a root holding only
the system dirs, four devices and its own directory, as bwrap builds one). Per job it mounts a
tmpfs of exactly ``disk_mb`` and ``max_files + 2`` inodes over its own directory (hiding its
``jobs/`` and ``out/``) and clones the job's **init**: pid 1 of a new pid namespace, which forks the
**job** and only reaps. The job drops every capability, confines itself (Landlock over its tmpfs,
seccomp) and reads its frame. The init has no Landlock domain of the job's, so the job cannot
ptrace, write or signal it; when the job exits the init exits, and the kernel kills whatever is
left in the pid namespace before the worker sees that exit; the worker then unmounts the tmpfs,
which frees everything in it. Where namespaces are refused the job is forked directly into a
directory under ``jobs/``, guarded by seccomp from signalling the worker, its usage is polled, and
the worker kills everything it may with ``kill(-1)`` (a Landlock signal scope or a uid of its own
make that the job's processes only) and deletes the directory.

It uses ``posix`` rather than ``os`` (see ``_inside_job``): a Landlock-tier cold run starts one
worker per call, and ``import os`` would add ~1.4 ms to each.

Over 400 lines, and kept whole on purpose: this text is not imported but sent as source into the
sandbox, where no retryctl package exists to import pieces from; every module more would be one more
source to send and compile at each cold start. It is already split where the split is free: the
parts the job runs (``_inside_job``) and the OS calls (``_inside_os``) are separate sources.

Frames: host → sandbox is a 4-byte big-endian length then ``marshal`` (the sandbox trusts the host);
sandbox → host is the fixed struct :data:`ANSWER` then the stdout and stderr bytes it announces (the
host trusts nothing it reads and checks every length).
"""

import gc
import posix
import resource
import select
import struct
import time

# On the host (tests, type checks) these import; inside the sandbox the sources are concatenated
# instead. (contextlib.suppress would cost an import at every sandbox start-up.)
try:
    from retryctl.sandbox._inside_job import (
        _read_exact,
        _write_all,
        exec_user_code,
        read_frame,
        set_limits,
        write_files,
    )
    from retryctl.sandbox._inside_os import (
        CLONE_NEWIPC,
        CLONE_NEWNET,
        CLONE_NEWNS,
        CLONE_NEWUTS,
        PR_SET_CHILD_SUBREAPER,
        PR_SET_DUMPABLE,
        PR_SET_NO_NEW_PRIVS,
        PR_SET_PDEATHSIG,
        PR_SET_THP_DISABLE,
        drop_capabilities,
        landlock_restrict,
        landlock_scope,
        minimal_root,
        mount_tmpfs,
        own_user_namespace,
        prctl,
        private_mounts,
        read_only_devices,
        seccomp_install,
        set_hostname,
        spawn_in_pid_namespace,
        unmount,
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
_JOB_NPROC_BASE = 3
"""Processes of the job's user namespace that count against its RLIMIT_NPROC besides its own: the
worker, the job's init and the job's first process."""


class _RunJob(BaseException):
    """Raised in a job's process once it is confined, with ``(code, workdir)``: it unwinds every
    frame of the worker's program up to :func:`worker_main`, which frees the :class:`Worker` (its
    config, the guard holding its pid, its state) before the job's code runs. So nothing the job can
    reach from its interpreter (the frames above its code, or a walk of the heap) is the worker's."""


class Worker:
    """The warm worker's state: its config and the next job's pre-forked processes. It keeps no
    count of jobs or anything else that changes between them, and neither the caller's pid nor its
    own (see :class:`_RunJob`; the caller is known by a pidfd, closed in :meth:`setup`)."""

    def __init__(self, cfg: dict) -> None:  # type: ignore[type-arg]
        self.cfg = cfg
        self.root = cfg["root"]
        self.next: tuple | None = None  # type: ignore[type-arg]
        """The pre-forked child waiting for the next job: (pid, work dir, job pipe, status pipe, outs)."""
        self.scoped = bool(cfg["scoped_kill"])
        self.isolated = False
        """Each job gets namespaces and a tmpfs of its own (user namespaces work here)."""
        self.mounted = False
        """A job's tmpfs is mounted over the root (unmounted before the next one is)."""
        self.lifeline = (-1, -1)
        """A pipe whose write end only this worker holds: a job's init exits when it reads EOF."""
        self.guard: bytes | None = None
        """The seccomp guard naming this worker's pid, made only where jobs share its pid namespace."""

    def setup(self) -> None:
        """Confine the worker itself: no core dumps of its memory, reaper of orphans, a user namespace
        of its own when allowed, and in the Landlock tier a domain (a signal scope, or the whole
        filesystem rules where jobs cannot have namespaces) that also scopes its ``kill(-1)``."""
        if self.cfg["isolate"]:
            # The Landlock tier also leaves the host's network namespace (bwrap made one already):
            # a socket name a job gets, even one the kernel picks (autobind), is then nobody else's.
            net = CLONE_NEWNET if self.cfg["worker_domain"] else 0
            try:  # first: a non-dumpable process may not write its own uid_map
                own_user_namespace(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | net)
                self.isolated = True
            except OSError:
                self.isolated = False
        if self.isolated:  # from here a failure is the worker's: it has left the host's namespaces
            private_mounts()
            set_hostname("sandbox")
            if self.cfg["worker_domain"]:  # the Landlock tier: a root of the system only, as bwrap's
                scratch = self.root + "/jobs/.root"
                posix.mkdir(scratch, 0o700)
                minimal_root(scratch, read_paths=self.cfg["read_paths"],
                             device_paths=self.cfg["device_paths"], keep=self.root,
                             pivot_nr=self.cfg["pivot_nr"])  # fmt: skip
            read_only_devices(self.cfg["device_paths"])  # the host's device inodes: no utime
        if self.isolated:
            self.lifeline = posix.pipe()
        # The walk of a job's directory (without namespaces) holds one descriptor per level.
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        prctl(PR_SET_DUMPABLE, 0)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        for path in (self.root + "/jobs", self.root + "/out"):
            try:  # noqa: SIM105 - no contextlib import in the sandbox's start-up
                posix.mkdir(path, 0o700)
            except FileExistsError:
                pass
        # The /dev/null that output past the cap goes to: opened now, so that no job's output changes
        # the worker's state (or the descriptor numbers the next job's pipes get).
        _Output.sink = posix.open("/dev/null", posix.O_WRONLY | posix.O_CLOEXEC)
        parent = self.cfg["parent_fd"]  # a pidfd of the caller: its pid never comes here
        if parent >= 0:
            # Last, after every credential change (which would reset it); a caller that died before
            # it was set has already exited, which makes its pidfd readable.
            prctl(PR_SET_PDEATHSIG, _SIGKILL)
            poller = select.poll()
            poller.register(parent, select.POLLIN)
            gone = poller.poll(0)
            posix.close(parent)
            if gone:
                posix._exit(125)
        if self.cfg["guard"] is not None and not self.isolated:  # a pid namespace hides the worker
            program, pid_at, neg_at = self.cfg["guard"]
            pid = posix.getpid()
            patched = bytearray(program)
            for offset in pid_at:
                struct.pack_into("<I", patched, offset, pid)
            for offset in neg_at:
                struct.pack_into("<I", patched, offset, (-pid) & 0xFFFFFFFF)
            self.guard = bytes(patched)
        abi = self.cfg["landlock_abi"]
        if self.cfg["worker_domain"]:
            # A domain handling filesystem rights would forbid the jobs' init its mounts.
            if self.isolated and abi >= 6:
                landlock_scope(abi)
            elif not self.isolated:
                landlock_restrict(abi, read_paths=self.cfg["read_paths"], write_paths=[self.root],
                                  device_paths=self.cfg["device_paths"])  # fmt: skip

    def prefork(self) -> None:
        """Set up the next job's processes ahead of its job, off the critical path; the job waits on a
        pipe for its frame. Called after each answer (and before the first job)."""
        if self.next is not None:
            return
        if self.mounted:  # the last job's tmpfs: everything in it is dead, so it is freed now
            unmount(self.root)
            self.mounted = False
        flags = posix.O_RDWR | posix.O_TMPFILE | posix.O_CLOEXEC
        # The job writes its stdout and stderr into pipes; the worker moves what it keeps into fresh
        # nameless files of its own (see _Output): no file the job can grow, map or re-flag.
        pipes = [posix.pipe() for _ in range(2)]
        outs = [_Output(r, posix.open(self.root + "/out", flags, 0o600)) for r, _ in pipes]
        ends = [w for _, w in pipes]
        theirs = [fd for out in outs for fd in (out.fd, out.file)]
        job_r, job_w = posix.pipe()
        status_r, status_w = posix.pipe()
        if self.isolated:
            workdir = self.root
            # Over the worker's own files, which the job then cannot reach by any path.
            mount_tmpfs(workdir, self.cfg["disk_bytes"], self.cfg["max_files"] + 2)
            self.mounted = True
            pid = spawn_in_pid_namespace(self.cfg["clone_nr"])
            if pid == 0:
                for fd in (job_w, status_r, self.lifeline[1], *theirs):
                    posix.close(fd)
                self._init(workdir, job_r, status_w, ends)
        else:
            workdir = f"{self.root}/jobs/{posix.urandom(8).hex()}"  # no count of earlier jobs
            posix.mkdir(workdir, 0o700)
            pid = posix.fork()
            if pid == 0:
                for fd in (job_w, status_r, *theirs):
                    posix.close(fd)
                self._job(workdir, job_r, ends)
        for fd in (job_r, status_w, *ends):
            posix.close(fd)
        self.next = (pid, workdir, job_w, status_r, outs)

    def serve(self, limits: dict) -> None:  # type: ignore[type-arg]
        """Forward one job frame to the pre-forked job, wait for it, answer the host."""
        self.prefork()
        pid, workdir, job_pipe, status_pipe, outs = self.next  # type: ignore[misc]
        self.next = None
        killed_by = None
        try:
            started = time.monotonic()
            _forward_frame(job_pipe)
            posix.close(job_pipe)
            job_pipe = -1
            cap, limit = limits["max_output_bytes"], limits["max_file_bytes"]
            killed_by, status = self._wait(pid, started + limits["timeout_s"], workdir, outs=outs, cap=cap,
                                           limit=limit)  # fmt: skip
            if self.isolated and killed_by is None:  # the init relays the job's own status
                relayed = posix.read(status_pipe, 4)
                if len(relayed) == 4:
                    status = int.from_bytes(relayed, "big")
            exit_code = posix.waitstatus_to_exitcode(status)
            _kill_all(self.scoped, pid)
            for out in outs:  # no writer is left: what is still in the pipes
                out.finish(cap, limit)
            _write_all(1, struct.pack(ANSWER, KIND_JOB, exit_code, KILLED_BY[killed_by], outs[0].size,
                                      outs[1].size, outs[0].kept, outs[1].kept))  # fmt: skip
            for out in outs:
                _send_file(out.file, out.kept)
        finally:
            for fd in (job_pipe, status_pipe):
                if fd >= 0:
                    posix.close(fd)
            for out in outs:
                out.close()
            _kill_all(self.scoped, pid)
            if not self.isolated:
                remove_tree(workdir)

    def _init(self, workdir: str, job_pipe: int, status_pipe: int, outs: list) -> None:  # type: ignore[type-arg]
        """The job's pid 1: it forks the job, then reaps orphans until the job exits or the worker dies
        (its lifeline reads EOF), and exits too, which makes the kernel kill the rest of its pid
        namespace. The job cannot write or signal it: it is outside the job's Landlock domain."""
        try:
            posix.setsid()
            devnull = posix.open("/dev/null", posix.O_RDWR)
            posix.dup2(devnull, 0)
            posix.dup2(devnull, 1)
            posix.close(devnull)
            job = posix.fork()
            if job == 0:
                self._job(workdir, job_pipe, outs)
            for fd in (job_pipe, *outs):
                posix.close(fd)
            job_fd = posix.pidfd_open(job)
            poller = select.poll()
            poller.register(job_fd, select.POLLIN)
            poller.register(self.lifeline[0], select.POLLIN)
            status = None
            while status is None:
                ready = poller.poll(_WATCH_S * 1000)
                if any(fd == self.lifeline[0] for fd, _ in ready):
                    posix._exit(125)
                while True:  # reap orphans (they would count against the job's RLIMIT_NPROC)
                    try:
                        pid, found = posix.waitpid(-1, posix.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    if pid == job:
                        status = found
            posix.write(status_pipe, status.to_bytes(4, "big"))
        except _RunJob:  # the job's process, on its way out of the worker's frames
            raise
        except BaseException as exc:
            posix.write(2, b"sandbox init failed: " + repr(exc).encode())
            posix._exit(125)
        posix._exit(0)  # the kernel now kills whatever the job left in its pid namespace

    def _job(self, workdir: str, job_pipe: int, outs: list) -> None:  # type: ignore[type-arg]
        try:
            prctl(PR_SET_PDEATHSIG, _SIGKILL)
            posix.setsid()
            devnull = posix.open("/dev/null", posix.O_RDONLY)
            for target, fd in ((0, devnull), (1, outs[0]), (2, outs[1]), (3, job_pipe)):
                posix.dup2(fd, target)
            posix.closerange(4, 1 << 16)
            posix.chdir(workdir)
            if self.isolated:
                drop_capabilities()
            if self.cfg["landlock_abi"]:
                landlock_restrict(self.cfg["landlock_abi"], read_paths=self.cfg["read_paths"],
                                  write_paths=[workdir], device_paths=self.cfg["device_paths"])  # fmt: skip
            prctl(PR_SET_THP_DISABLE, 1)  # see direct_main: before seccomp, which then locks it
            if self.cfg["seccomp"] is not None:
                seccomp_install(self.cfg["seccomp"])
            if self.guard is not None:
                seccomp_install(self.guard)
            job = read_frame(3)
            posix.close(3)
            files_error = None
            try:
                write_files(workdir, job["files"])
            except OSError as exc:  # e.g. the files alone exceed the disk quota: the job's failure
                files_error = exc
            set_limits(job["limits"], _JOB_NPROC_BASE if self.isolated else self.cfg["nproc_base"])
        except EOFError:  # the worker is shutting down: there is no job
            posix._exit(0)
        except BaseException as exc:
            posix.write(2, b"sandbox setup failed: " + repr(exc).encode())
            posix._exit(125)
        if files_error is not None:
            posix.write(2, f"sandbox: cannot write the job's files: {files_error}\n".encode())
            posix._exit(1)
        self.__dict__.clear()  # this process's copy; the worker's own is untouched
        raise _RunJob(job["code"], workdir)

    def _wait(self, pid: int, deadline: float, workdir: str, *, outs: list, cap: int, limit: int) -> tuple:  # type: ignore[type-arg]
        """Wait for the job (its init, when isolated) to exit, moving its output as it comes; kill it
        at the deadline or past its file-count quota. Returns ``(killed_by, wait status)``."""
        cfg = self.cfg
        # The job's tmpfs is measured with one statvfs; without one, the directory is walked.
        over = tmpfs_over if self.isolated else usage_over
        pidfd = posix.pidfd_open(pid)
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            by_fd = {out.fd: out for out in outs}
            for fd in by_fd:
                poller.register(fd, select.POLLIN)
            checked = time.monotonic()
            while True:
                now = time.monotonic()
                left = deadline - now
                killed_by = None
                exited = False
                if left > 0:
                    for fd, _ in poller.poll(min(left, _WATCH_S) * 1000):
                        if fd == pidfd:
                            exited = True
                        elif not by_fd[fd].pump(cap, limit):
                            poller.unregister(fd)
                    if exited:
                        return None, posix.waitpid(pid, 0)[1]
                    if now - checked < _WATCH_S:
                        continue
                    checked = now
                if left <= 0:
                    killed_by = "timeout"
                elif over(workdir, cfg["disk_bytes"], cfg["max_files"]):
                    # A job that ended on its own in the meantime is not killed (its output woke
                    # this loop, its exit did not yet): what it left is freed with its tmpfs.
                    if any(fd == pidfd for fd, _ in poller.poll(0)):
                        return None, posix.waitpid(pid, 0)[1]
                    killed_by = "disk_quota"
                else:
                    continue
                _signal_all(self.scoped, pid)
                status = posix.waitpid(pid, 0)[1]
                if posix.WIFEXITED(status):  # it ended on its own before the signal landed
                    return None, status
                return killed_by, status
        finally:
            posix.close(pidfd)


_SPLICE_F_NONBLOCK = 2


class _Output:
    """One of a job's output pipes, as the worker drains it: the first ``cap`` bytes go into
    ``file`` (a nameless file only the worker holds), the rest into ``/dev/null``, all inside the
    kernel (``splice``: no job's output in the worker's memory, where a later job's fork would find
    it); past ``limit`` bytes the pipe is closed and the job's next write fails with ``EPIPE``."""

    sink = -1
    """``/dev/null``, opened once per worker."""

    def __init__(self, fd: int, file: int) -> None:
        posix.set_blocking(fd, False)
        self.fd = fd
        self.file = file
        self.kept = 0
        self.size = 0

    def _move(self, cap: int) -> int:
        """Bytes moved out of the pipe now; 0 at EOF; raises ``BlockingIOError`` when it is empty."""
        if self.kept < cap:
            moved = posix.splice(self.fd, self.file, cap - self.kept, flags=_SPLICE_F_NONBLOCK)
            self.kept += moved
            return moved
        return posix.splice(self.fd, _Output.sink, 1 << 20, flags=_SPLICE_F_NONBLOCK)

    def pump(self, cap: int, limit: int) -> bool:
        """Move what is there now; False once the pipe is closed (EOF, or past ``limit``)."""
        if self.fd < 0:
            return False
        try:
            moved = self._move(cap)
        except BlockingIOError:
            return True
        except OSError:  # a full out file cannot happen (it is sized); stop reading if anything does
            moved = 0
        self.size += moved
        if not moved or self.size > limit:
            self._close_pipe()
            return False
        return True

    def finish(self, cap: int, limit: int) -> None:
        """Move what is left once no writer runs any more, then close the pipe."""
        while self.fd >= 0:
            try:
                moved = self._move(cap)
            except OSError:  # BlockingIOError: a writer is still alive; what it writes is not read
                break
            self.size += moved
            if not moved or self.size > limit:
                break
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.fd >= 0:
            posix.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        """Close the pipe and the file."""
        self._close_pipe()
        if self.file >= 0:
            posix.close(self.file)
            self.file = -1


def _forward_frame(job_pipe: int) -> None:
    """Move one length-prefixed frame from stdin to ``job_pipe`` without reading it into memory; if
    the job is gone, drain the frame so the next one starts where it should."""
    header = _read_exact(0, 4)
    left = int.from_bytes(header, "big")
    target = job_pipe
    try:
        _write_all(job_pipe, header)
    except OSError:
        target = -1
    sink = -1
    try:
        while left:
            if target < 0:
                if sink < 0:
                    sink = posix.open("/dev/null", posix.O_WRONLY)
                target = sink
            try:
                moved = posix.splice(0, target, min(left, 1 << 20))
            except BrokenPipeError:  # the job died before reading its frame
                target = -1
                continue
            if not moved:
                raise EOFError
            left -= moved
    finally:
        if sink >= 0:
            posix.close(sink)


def _send_file(fd: int, length: int) -> None:
    """Send the first ``length`` bytes of ``fd`` to stdout (the host) inside the kernel."""
    offset = 0
    while offset < length:
        sent = posix.sendfile(1, fd, offset, length - offset)
        if not sent:  # the file shrank under us: pad so the frame stays as announced
            _write_all(1, bytes(length - offset))
            return
        offset += sent


def tmpfs_over(path: str, max_bytes: int, max_entries: int) -> bool:
    """Whether the tmpfs at ``path`` holds more than ``max_bytes`` or ``max_entries`` inodes besides
    its root: one ``statvfs``, which no directory mode, depth or unlinked file can hide from."""
    try:
        st = posix.statvfs(path)
    except OSError:
        return False
    used_bytes = (st.f_blocks - st.f_bfree) * st.f_frsize
    return used_bytes > max_bytes or st.f_files - st.f_ffree - 1 > max_entries


_O_DIR = posix.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC


def _open_dir(name: str, dir_fd: int | None) -> int:
    """Open a directory the job may have made unreadable: it (and every file in it) belongs to the
    uid this runs as, so give the owner its rights back first (again, if a running job took them
    away in between, a few times)."""
    for attempt in range(3):
        try:  # noqa: SIM105
            posix.chmod(name, 0o700, dir_fd=dir_fd)
        except OSError:
            pass
        try:
            return posix.open(name, _O_DIR, dir_fd=dir_fd)
        except PermissionError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def usage_over(root: str, max_bytes: int, max_entries: int) -> bool:
    """Whether the tree under ``root`` (a plain directory: no namespaces here) holds more than
    ``max_bytes`` of disk or ``max_entries`` files and directories. Walks by file descriptor (no
    path grows with depth), restoring the owner's rights on directories as it goes; a tree it cannot
    walk at all (too deep for the open files allowed) counts as over the quota. A best effort,
    polled: a running job can change its tree under the walk."""
    total, entries = 0, 0
    try:
        stack = [_open_dir(root, None)]
    except OSError:
        return False
    try:
        while stack:
            fd = stack.pop()
            try:
                with posix.scandir(fd) as it:
                    for entry in it:
                        entries += 1
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(_open_dir(entry.name, fd))
                        if total > max_bytes or entries > max_entries:
                            return True
            except (FileNotFoundError, PermissionError):  # changed under the walk: next poll
                continue
            except OSError:
                return True
            finally:
                posix.close(fd)
    finally:
        for fd in stack:
            posix.close(fd)
    return False


def remove_tree(path: str) -> bool:
    """Delete ``path`` and everything under it once nothing runs there any more, whatever the job
    did to it: iterative, one open directory at a time (``..`` walks back up, so neither the
    recursion limit nor PATH_MAX nor the open-file limit is reached at any depth), restoring the
    owner's rights on each directory. False if something could not be removed."""
    try:
        posix.rmdir(path)  # the common case: empty
        return True
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        fd = _open_dir(path, None)
    except OSError:
        return False
    names: list = []  # type: ignore[type-arg]
    try:
        while True:
            with posix.scandir(fd) as it:
                found = list(it)
            sub = None
            for entry in found:
                if entry.is_dir(follow_symlinks=False):
                    sub = entry.name
                else:
                    posix.unlink(entry.name, dir_fd=fd)
            if sub is not None:
                child = _open_dir(sub, fd)
                posix.close(fd)
                fd = child
                names.append(sub)
                continue
            if not names:
                break
            parent = posix.open("..", _O_DIR & ~posix.O_NOFOLLOW, dir_fd=fd)
            posix.close(fd)
            fd = parent
            posix.rmdir(names.pop(), dir_fd=fd)
    except OSError:
        return False
    finally:
        posix.close(fd)
    try:
        posix.rmdir(path)
    except OSError:
        return False
    return True


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


def worker_main() -> None:
    """Warm mode (see :func:`_serve_jobs`); in each job's process, once the worker's frames are
    unwound (:class:`_RunJob`), the job's code."""
    try:
        _serve_jobs()
    except _RunJob as start:
        code, workdir = start.args
    else:  # pragma: no cover - _serve_jobs only leaves by exiting or by a job's _RunJob
        posix._exit(125)
    posix._exit(exec_user_code(code, workdir, set_env=True))


def _serve_jobs() -> None:
    """Answer the config frame with a ready answer, then one answer per job."""
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
    _write_all(1, struct.pack(ANSWER, KIND_READY, posix.getpid(), 0, 0, 0, 0, 0))
    while True:
        try:
            worker.serve(read_frame(0)["limits"])
        except EOFError:
            posix._exit(0)
        if worker.cfg["one_shot"]:  # a cold run: everything it started is already dead
            posix._exit(0)
        worker.prefork()
