"""The fourth attack suite: classes none of the first three rounds (or issue #30's fixes) tried, on both
isolating tiers through ``run_code`` and ``Sandbox().run`` (four modes): descriptors the caller leaves
inheritable, host sockets and mounts seen through ``/proc``, access times of system files as a write
to the host and a channel, real-time scheduling, namespaces and descriptor passing, descriptor-table
objects, output that is not text, a job that closes its output and runs on, a job that stops itself,
and files a pool job leaves for the next one. Each test passes when the sandbox holds."""

from __future__ import annotations

import ast
import os
import random
import socket
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from retryctl.sandbox import ExecResult, Sandbox, Tier, run_code
from retryctl.sandbox._seccomp import seccomp_arch
from tests.sandbox.conftest import TEST_LIMITS, Runner, processes_with

pytestmark = pytest.mark.skipif(seccomp_arch() != "x86_64", reason="syscall numbers are x86_64's")


def code(src: str) -> str:
    return textwrap.dedent(src).strip() + "\n"


def report(res: ExecResult) -> dict[str, object]:
    """The job's last stdout line, a dict literal."""
    assert res.exit_code == 0, res
    return ast.literal_eval(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


_LIST_FDS = code("""
    import os
    found = []
    for fd in range(3, 1024):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.append(fd)
    print({"fds": found})
""")


class TestInheritedDescriptors:
    def test_no_descriptor_the_caller_left_inheritable_reaches_a_job(self, tier: Tier, tmp_path: Path):
        """The caller holds a secret file and a listening socket marked inheritable (as a careless
        library leaves them); neither a cold job nor a job of a pool started meanwhile gets them."""
        secret = tmp_path / "secret"
        secret.write_text("TOPSECRET")
        with open(secret) as fh, socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            os.set_inheritable(fh.fileno(), True)
            os.set_inheritable(listener.fileno(), True)
            cold = run_code(_LIST_FDS, tier=tier, limits=TEST_LIMITS)
            with Sandbox(tier=tier, limits=TEST_LIMITS, workers=1) as sandbox:
                warm = sandbox.run(_LIST_FDS)
        assert report(cold) == {"fds": []}
        assert report(warm) == {"fds": []}


class TestHostViews:
    def test_proc_shows_no_host_socket_process_mount_or_cgroup(self, run: Runner, tmp_path: Path):
        """A host TCP listener and an abstract unix listener the test holds, host pids, host paths
        and cgroups, looked for through every ``/proc`` and ``/sys`` view the job can open."""
        name = "retryctl-r4-" + uuid.uuid4().hex[:12]
        with socket.socket() as tcp, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
            tcp.bind(("127.0.0.1", 0))
            tcp.listen(1)
            unix.bind("\0" + name)
            unix.listen(1)
            port = f":{tcp.getsockname()[1]:04X}"
            res = run(
                code("""
                import os
                seen = {}
                for path in ("/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp", "/proc/net/unix",
                             "/proc/self/mountinfo", "/proc/self/cgroup", "/proc/1/cmdline",
                             "/sys/fs/cgroup", "/sys/class/net"):
                    try:
                        if os.path.isdir(path):
                            seen[path] = " ".join(os.listdir(path))
                        else:
                            with open(path, "rb") as fh:
                                seen[path] = fh.read().decode("utf-8", "replace")
                    except OSError:
                        pass
                try:
                    seen["pids"] = " ".join(e for e in os.listdir("/proc") if e.isdigit())
                except OSError:
                    pass
                print(seen)
                """)
            )
        seen = report(res)
        text = "\n".join(str(v) for v in seen.values())
        assert port not in text and name not in text
        assert str(tmp_path) not in text and os.getcwd() not in text
        assert all(int(pid) <= TEST_LIMITS.nproc for pid in str(seen.get("pids", "")).split())
        for line in str(seen.get("/proc/self/cgroup", "")).splitlines():
            assert line.endswith(":/"), line
        assert "/sys/fs/cgroup" not in seen and "/sys/class/net" not in seen


def _old_unread_files(count: int) -> list[str]:
    """System files last read more than two days ago: reading one must update its access time
    under ``relatime``, so an unchanged time means the read did not reach the host's inode."""
    now, found = time.time(), []
    for root, _dirs, files in os.walk("/usr/share/doc"):
        for name in files:
            path = os.path.join(root, name)
            st = os.stat(path, follow_symlinks=False)
            if not os.path.islink(path) and st.st_size and now - st.st_atime > 2 * 86400:
                found.append(path)
        if len(found) > 200:
            break
    return random.sample(found, count) if len(found) >= count else []


class TestHostFileTimes:
    def test_reading_and_listing_system_files_leaves_their_access_times(self, run: Runner):
        """An access time is a write to the host's disk, and a channel to anyone who can ``stat``:
        a job reads a file and lists a directory not touched for days."""
        files = _old_unread_files(2)
        if not files:
            pytest.skip("no system file with an old access time here")
        control, target = files
        before = os.stat(control).st_atime
        Path(control).read_bytes()
        if os.stat(control).st_atime == before:
            pytest.skip("the host's mount does not update access times (noatime)")
        folder = os.path.dirname(target)
        times = (os.stat(target).st_atime, os.stat(folder).st_atime)
        res = run(f"import os\nprint(len(open({target!r}, 'rb').read()), len(os.listdir({folder!r})))")
        assert res.exit_code == 0, res
        assert (os.stat(target).st_atime, os.stat(folder).st_atime) == times


class TestPrivilege:
    def test_no_realtime_scheduling_raised_priority_new_namespace_or_passed_descriptor(self, run: Runner):
        """A real-time or raised-priority job would starve the host's cores past any timeout; a new
        user or pid namespace would give it capabilities; ``SCM_RIGHTS`` holds files in flight."""
        res = run(
            code("""
            import array, ctypes, os, resource, socket
            libc = ctypes.CDLL(None, use_errno=True)
            got = {}
            for name, policy in (("fifo", os.SCHED_FIFO), ("rr", os.SCHED_RR)):
                try:
                    os.sched_setscheduler(0, policy, os.sched_param(1))
                    got[name] = True
                except OSError:
                    pass
            try:
                os.setpriority(os.PRIO_PROCESS, 0, -5)
                got["nice"] = True
            except OSError:
                pass
            if libc.syscall(251, 1, 0, 1 << 13) == 0:           # ioprio_set: real-time class
                got["ioprio"] = True
            try:
                resource.setrlimit(resource.RLIMIT_RTPRIO, (1, 1))
                got["rtprio"] = True
            except (OSError, ValueError):
                pass
            for flags in (0x10000000, 0x20000000, 0x40000000):  # CLONE_NEWUSER, NEWPID, NEWNET
                if libc.unshare(flags) == 0:
                    got[hex(flags)] = True
            pid = libc.syscall(56, 0x10000000 | 0x20000000 | 17, 0, 0, 0, 0)   # clone
            if pid == 0:
                os._exit(0)
            if pid > 0:
                os.waitpid(pid, 0)
                got["clone"] = True
            a, b = socket.socketpair()
            try:
                a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0]))])
                got["scm_rights"] = True
            except OSError:
                pass
            print(got)
            """)
        )
        assert report(res) == {}


class TestDescriptorTables:
    def test_event_timer_signal_and_epoll_objects_stop_at_nofile(self, run: Runner):
        """Each of these is kernel memory outside ``memory_mb``; ``nofile`` must bound them."""
        res = run(
            code("""
            import ctypes, os, select
            libc = ctypes.CDLL(None, use_errno=True)
            mask, keep = ctypes.c_uint64(0), []
            makers = [lambda: os.eventfd(0), lambda: keep.append(select.epoll()) or keep[-1].fileno(),
                      lambda: libc.syscall(283, 1, 0),                            # timerfd_create
                      lambda: libc.syscall(289, -1, ctypes.byref(mask), 8, 0)]    # signalfd4
            held = 0
            for make in makers * 400:
                try:
                    fd = make()
                except OSError:
                    continue
                if fd >= 0:
                    held += 1
            print({"held": held})
            """)
        )
        assert int(report(res)["held"]) <= TEST_LIMITS.nofile  # type: ignore[call-overload]


class TestMisreport:
    def test_bytes_that_are_not_text_come_back_in_a_result(self, run: Runner):
        """Invalid UTF-8, NUL and terminal escapes on both streams: the call returns a result that
        keeps what followed them."""
        res = run(
            code(r"""
            import sys
            for stream in (sys.stdout.buffer, sys.stderr.buffer):
                stream.write(b"\xff\xfe\xc0\x80 \x00 \x1b[2J\x1b]0;t\x07 \xed\xa0\x80\nend\n")
                stream.flush()
            """)
        )
        assert res.exit_code == 0, res
        for text in (res.stdout, res.stderr):
            assert text.endswith("end\n") and "\ufffd" in text

    def test_a_job_that_closes_its_output_is_waited_for(self, run: Runner):
        """Closing stdout and stderr looks like an exit to a reader that stops at end of file."""
        res = run(
            code("""
            import os, time
            print("hi", flush=True)
            os.close(1)
            os.close(2)
            time.sleep(1)
            os._exit(7)
            """)
        )
        assert (res.exit_code, res.stdout, res.timed_out) == (7, "hi\n", False)

    def test_a_job_that_stops_itself_is_killed_at_the_timeout(self, run: Runner):
        """``SIGSTOP`` on itself and on a child (a stopped process ignores everything but
        ``SIGKILL`` and ``SIGCONT``): the call still ends at the timeout, leaving nothing."""
        marker = str(9_000_000 + uuid.uuid4().int % 10**6)
        res = run(
            code(f"""
            import os, signal, subprocess, time
            child = subprocess.Popen(["sleep", "{marker}"])
            os.kill(child.pid, signal.SIGSTOP)
            os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(3600)
            """),
            timeout_s=1,
        )
        assert res.timed_out, res
        assert processes_with(marker) == []


_PLACES = ["/tmp", "/var/tmp", "/dev/shm", "/run", "/dev", "/", "..", "/proc/self/cwd/.."]


class TestPoolLeftovers:
    def test_nothing_written_anywhere_reaches_the_next_job(self, tier: Tier):
        """A job writes a file into every place it might reach (and its own dir); the next job of
        the same worker looks for each of them."""
        name = "r4-" + uuid.uuid4().hex[:12]
        with Sandbox(tier=tier, limits=TEST_LIMITS, workers=1) as sandbox:
            first = sandbox.run(
                code(f"""
                import os
                wrote = []
                for place in {_PLACES!r} + [os.getcwd(), os.path.expanduser("~")]:
                    try:
                        with open(os.path.join(place, {name!r}), "w") as fh:
                            fh.write("left")
                        wrote.append(place)
                    except OSError:
                        pass
                print(wrote)
                """)
            )
            second = sandbox.run(
                code(f"""
                import os
                seen = [p for p in {_PLACES!r} + [os.getcwd(), os.path.expanduser("~")]
                        if os.path.exists(os.path.join(p, {name!r}))]
                print({{"seen": seen, "cwd": os.listdir(".")}})
                """)
            )
        assert first.exit_code == 0, first
        assert report(second) == {"seen": [], "cwd": []}

    def test_a_jobs_processes_do_not_use_up_the_next_jobs_nproc(self, tier: Tier):
        """Each job forks sleepers until ``RLIMIT_NPROC`` refuses and exits with them alive: if
        any survived into the next job (or were not yet reaped), that job could fork fewer."""
        forker = code("""
            import os, time
            forked = 0
            while True:
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                forked += 1
            print({"forked": forked})
        """)
        with Sandbox(tier=tier, limits=TEST_LIMITS, workers=1) as sandbox:
            counts = [int(str(report(sandbox.run(forker))["forked"])) for _ in range(3)]
        assert counts[0] >= TEST_LIMITS.nproc - 4 and counts[1:] == counts[:1] * 2, counts


# Every int a job can find in the interpreter state it starts with: the frames above its code, the
# attributes of the objects they hold, and the 32-bit operands of any BPF program among them.
_INHERITED_INTS = code("""
    import struct, sys, time
    found, frame = {}, sys._getframe().f_back
    while frame is not None:
        for key, value in list(frame.f_locals.items()) + list(frame.f_globals.items()):
            pairs = [(key, value)]
            if type(value).__module__ == "__main__" and hasattr(value, "__dict__"):
                pairs += [(key + "." + k, v) for k, v in vars(value).items()]
            pairs += [(f"{name}[{k!r}]", v) for name, d in list(pairs) if isinstance(d, dict)
                      for k, v in d.items()]
            for name, val in pairs:
                if isinstance(val, int) and not isinstance(val, bool):
                    found[name] = val
                elif isinstance(val, bytes) and len(val) % 8 == 0:
                    for at in range(0, len(val), 8):
                        found[f"{name}[{at // 8}].k"] = struct.unpack_from("<I", val, at + 4)[0]
        frame = frame.f_back
    print(found, flush=True)
    time.sleep(0.5)
""")


# The same through the heap: every int held by a container the collector tracks, named by the
# container's type and the int's place in it; a dict with a "parent_pid" key is reported as such.
_HEAP_INTS = code("""
    import gc, struct, sys, time
    gc.unfreeze()
    found, seen = {}, 0
    def note(where, val):
        if isinstance(val, int) and not isinstance(val, bool):
            found[where] = val
        elif isinstance(val, (bytes, bytearray)) and len(val) % 8 == 0 and len(val) <= 1 << 16:
            for at in range(0, len(val), 8):
                found[f"{where}[{at // 8}].k"] = struct.unpack_from("<I", val, at + 4)[0]
    for obj in gc.get_objects():
        if obj is found or type(obj).__name__ == "frame":
            continue
        kind = type(obj).__qualname__
        if isinstance(obj, dict):
            if "parent_pid" in obj:
                found["parent_pid dict"] = 2
            items = [(k, v) for k, v in list(obj.items()) if isinstance(k, str)]
        elif isinstance(obj, (list, tuple)):
            items = list(enumerate(obj))
        elif hasattr(obj, "__dict__") and isinstance(vars(obj), dict) and type(obj).__module__ == "__main__":
            items = list(vars(obj).items())
        else:
            continue
        for key, val in items:
            note(f"{kind}:{key}", val)
    print(found, flush=True)
    time.sleep(0.5)
""")


# Past the interpreter: the job's heap (a fork of the worker's, where malloc put the config frame),
# read with ctypes, for the config key that once carried the caller's pid and the ints after it.
_MEMORY_INTS = code("""
    import ctypes, os, struct, time
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sbrk.restype = ctypes.c_void_p
    libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    r, w = os.pipe()
    end = start = libc.sbrk(0) & ~4095
    while libc.write(w, start - 4096, 1) == 1:     # EFAULT, not a crash, below the heap
        os.read(r, 1)
        start -= 4096
    data, found = ctypes.string_at(start, end - start), {}
    at = data.find(b"parent_")
    while at >= 0:
        for skip in range(8, 24):
            found[f"{start + at:x}+{skip}"] = struct.unpack_from("<I", data, at + skip)[0]
        at = data.find(b"parent_", at + 1)
    print(found, flush=True)
    time.sleep(0.5)
""")


# Whatever of the sandbox's own program state a job reaches, by the frames above its code or the
# heap: instances of the program's classes (module ``__main__``, as the job's own would be: the
# probe defines none) and the worker's config (a dict with its "seccomp" and "root" keys).
_WORKER_STATE = code("""
    import gc
    gc.unfreeze()
    found, frame = set(), __import__("sys")._getframe().f_back
    objects = list(gc.get_objects())
    while frame is not None:
        objects += list(frame.f_locals.values())
        frame = frame.f_back
    for obj in objects:
        if type(obj).__module__ == "__main__" and not isinstance(obj, type):
            found.add(type(obj).__name__)
        elif isinstance(obj, dict) and "seccomp" in obj and "root" in obj:
            found.add("config")
    print({"found": sorted(found)})
""")


def _while_watched(run: Runner, program: str) -> dict[str, int]:
    """Run ``program`` and return the ints it reports that are the test's own pid or the host pid
    of one of its sandbox processes (collected while the job runs)."""
    result: list[ExecResult] = []
    worker = threading.Thread(target=lambda: result.append(run(program)))
    host = {os.getpid()}
    worker.start()
    while worker.is_alive():
        host |= _host_descendants()
        worker.join(0.02)
    ints = report(result[0])
    return {
        name: value
        for name, value in ints.items()
        # Every value the programs report is an int ("parent_pid dict" is a marker, 2).
        if isinstance(value, int) and (name == "parent_pid dict" or value in host)
    }


def _host_descendants() -> set[int]:
    """Pids of the test process's descendants on the host (the sandbox's processes)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


class TestInheritedState:
    def test_no_host_pid_in_the_state_a_job_inherits(self, run: Runner):
        """The job's interpreter starts inside the sandbox's own program: nothing it left in the
        frames above the job's code may be a host pid (the docs: no host pids). The test collects its
        own pid and the host pids of its sandbox processes while the job runs."""
        leaked = {name: value for name, value in _while_watched(run, _INHERITED_INTS).items() if value > 1}
        assert leaked == {}

    def test_no_host_pid_on_the_heap_a_job_inherits(self, run: Runner):
        """The same, found the other way: every container the collector knows of (after undoing
        any ``gc.freeze``), whoever still refers to it, and any dict holding a ``parent_pid``."""
        leaked = {name: value for name, value in _while_watched(run, _HEAP_INTS).items() if value > 1}
        assert leaked == {}

    def test_no_worker_state_is_reachable_from_a_job(self, run: Runner):
        """Not only no pid: nothing of the worker (its object, its output queues, its config) is
        left for a job's interpreter to find, so no later change to it can become a leak. The
        program's libc bindings (a ``dlopen`` handle and function pointers) hold no state."""
        found = report(run(_WORKER_STATE))["found"]
        assert isinstance(found, list) and set(found) <= {"_Libc", "_LibcFunc"}

    def test_no_caller_pid_left_in_a_jobs_memory(self, run: Runner):
        """The same in raw memory: the caller's pid never reaches the worker, so no freed buffer
        of it (its config frame, say) can hold it where the job's ``ctypes`` reads."""
        leaked = {name: value for name, value in _while_watched(run, _MEMORY_INTS).items() if value > 1}
        assert leaked == {}

    @pytest.mark.parametrize("program", [_INHERITED_INTS, _HEAP_INTS], ids=["frames", "heap"])
    def test_a_pool_job_cannot_tell_what_ran_before_it(self, tier: Tier, program: str):
        """Every job of a worker must start from the same state: a counter that differs between
        its first and third job tells a job how many ran before it, and (reset when a job times out
        and its worker is replaced) lets one job pass a bit to the next."""
        with Sandbox(tier=tier, limits=TEST_LIMITS, workers=1) as sandbox:
            first = report(sandbox.run(program))
            sandbox.run("print('x' * 100_000)")  # past the output cap: output the worker discards
            third = report(sandbox.run(program))
        differing = {name: (first[name], third.get(name)) for name in first if first[name] != third.get(name)}
        assert differing == {} and set(third) == set(first)


class TestOtherJobs:
    def test_a_job_cannot_signal_or_stop_a_concurrent_job(self, tier: Tier):
        """Two workers run a sleeper and an attacker at once; the attacker sends ``SIGKILL`` and
        ``SIGSTOP`` to every pid it can name (its own namespace's, and the host's whole default
        range): the sleeper finishes normally."""
        with Sandbox(tier=tier, limits=TEST_LIMITS, workers=2) as sandbox:
            sleeper: list[ExecResult] = []
            thread = threading.Thread(
                target=lambda: sleeper.append(sandbox.run("import time\ntime.sleep(1.5)\nprint('alive')"))
            )
            thread.start()
            time.sleep(0.3)
            attacker = sandbox.run(
                code("""
                import os, signal
                hit = 0
                for sig in (signal.SIGSTOP, signal.SIGKILL):
                    for pid in range(2, 65536):
                        if pid == os.getpid():
                            continue
                        try:
                            os.kill(pid, sig)
                            hit += 1
                        except OSError:
                            pass
                print({"hit": hit})
                """)
            )
            thread.join()
        assert report(attacker) == {"hit": 0}
        assert (sleeper[0].exit_code, sleeper[0].stdout, sleeper[0].timed_out) == (0, "alive\n", False)


class TestWithoutNamespaces:
    """Where jobs share the worker's pid namespace, the seccomp guard naming the worker's pid (now
    made only there, at the worker's start-up) still keeps a job from signalling it."""

    def test_a_job_cannot_signal_its_worker(self, tier: Tier, monkeypatch: pytest.MonkeyPatch):
        from retryctl.sandbox import _worker

        config = _worker.WorkerProcess._config

        def without_namespaces(self: _worker.WorkerProcess, root: str) -> dict[str, object]:
            return dict(config(self, root), isolate=False)

        monkeypatch.setattr(_worker.WorkerProcess, "_config", without_namespaces)
        attack = code("""
            import os, signal
            refused = []
            for target in (os.getppid(), -os.getppid(), -1):
                try:
                    os.kill(target, signal.SIGKILL)
                except PermissionError:
                    refused.append(target < 0)
            print({"refused": refused})
        """)
        with Sandbox(tier=tier, limits=TEST_LIMITS, workers=1) as sandbox:
            first = sandbox.run(attack)
            second = sandbox.run("print('next')")
        assert report(first) == {"refused": [False, True, True]}
        assert (second.exit_code, second.stdout) == (0, "next\n")
