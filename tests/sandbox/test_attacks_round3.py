"""The third attack suite: variants of every class of issue #17 that neither earlier suite runs, on both
isolating tiers through both ``run_code`` and ``Sandbox().run``. Each attack is real code run in the
sandbox; the evidence is taken on the host wherever it can be (no process left, no name bound in the
host's network namespace, host files unchanged), else from a second job of the same pool."""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from retryctl.sandbox import ExecResult, Tier
from retryctl.sandbox._inside_worker import remove_tree
from tests.sandbox.conftest import Runner, processes_with


def code(src: str) -> str:
    return textwrap.dedent(src).strip() + "\n"


def marker() -> str:
    """A `sleep` argument no other process on the host has: a straggler's command line carries it."""
    return f"{uuid.uuid4().int % 10**6}.{os.getpid()}"


_NAMING_MKDTEMP = b"""import tempfile
_mkdtemp = tempfile.mkdtemp
def _named(*args, **kwargs):
    path = _mkdtemp(*args, **kwargs)
    print(path, flush=True)
    return path
tempfile.mkdtemp = _named
"""


class TestOutliving:
    def test_a_cleared_death_signal_and_ignored_signals_do_not_survive_a_timeout(self, run: Runner):
        mark = marker()
        res = run(
            code(f"""
            import ctypes, os, signal, time
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, 0, 0, 0, 0)                 # PR_SET_PDEATHSIG 0: outlive whoever started us
            for sig in range(1, 32):
                try:
                    signal.signal(sig, signal.SIG_IGN)
                except (OSError, ValueError):
                    pass
            if os.fork() == 0:
                libc.prctl(1, 0, 0, 0, 0)
                os.setpgid(0, 0)                      # a process group of its own, then a session
                if os.fork() == 0:
                    os.setsid()
                    os.execv("/usr/bin/sleep", ["sleep", "{mark}"])
                os._exit(0)
            print("waiting", flush=True)
            time.sleep(60)
            """),
            timeout_s=1,
        )
        assert res.timed_out, res
        assert processes_with(mark) == []

    def test_clone_parent_spawn_in_a_new_session_and_signals_to_pid_1(self, run: Runner):
        mark = marker()
        res = run(
            code(f"""
            import ctypes, os, signal
            libc = ctypes.CDLL(None, use_errno=True)
            me = os.getpid()
            # clone(CLONE_PARENT): a sibling of this job, i.e. a child of whatever started it.
            pid = libc.syscall(56, 0x8000 | 17, 0, 0, 0, 0)
            if pid == 0:
                libc.prctl(1, 0, 0, 0, 0)
                os.setsid()
                os.execv("/usr/bin/sleep", ["sleep", "{mark}"])
            os.posix_spawn("/usr/bin/sleep", ["sleep", "{mark}"], {{}}, setsid=True)
            libc.prctl(36, 1, 0, 0, 0)                # PR_SET_CHILD_SUBREAPER
            if me != 1:                               # pid 1 is someone else's: reach it
                for name, act in (("mem", lambda: open("/proc/1/mem", "r+b", buffering=0)),
                                  ("ptrace", lambda: libc.ptrace(16, 1, 0, 0) == 0 or 1 / 0),
                                  ("stop", lambda: signal.pidfd_send_signal(os.pidfd_open(1),
                                                                            signal.SIGSTOP)),
                                  ("kill", lambda: os.kill(1, signal.SIGKILL))):
                    try:
                        act()
                        print("REACHED pid 1", name)
                    except (OSError, ZeroDivisionError):
                        pass
            print("left behind")
            """),
            timeout_s=5,
        )
        assert "REACHED" not in res.stdout, res
        assert res.stdout.endswith("left behind\n"), res
        assert processes_with(mark) == []

    @pytest.mark.parametrize("entry", ["run_code", "Sandbox.run"])
    def test_nothing_outlives_a_caller_killed_mid_job(self, tier: Tier, entry: str):
        mark = marker()
        job = code(f"""
            import os, time
            if os.fork() == 0:
                os.setsid()
                os.execv("/usr/bin/sleep", ["sleep", "{mark}"])
            time.sleep(60)
            """)
        call = (
            f"run_code({job!r}, tier={tier.value!r}, timeout_s=60)"
            if entry == "run_code"
            else f"Sandbox(tier={tier.value!r}).__enter__().run({job!r}, timeout_s=60)"
        )
        # The call goes in on stdin: a marker on the caller's own command line would be found too.
        # The caller names the worker directories it makes: a killed caller cannot remove them.
        caller = subprocess.Popen(
            [sys.executable, "-c", "import sys; exec(sys.stdin.read())"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=Path(__file__).parents[2],
        )  # fmt: skip
        assert caller.stdin is not None and caller.stdout is not None
        caller.stdin.write(
            _NAMING_MKDTEMP + f"from retryctl.sandbox import Sandbox, run_code\n{call}\n".encode()
        )
        caller.stdin.close()
        try:
            deadline = time.monotonic() + 30
            while not processes_with(mark):
                assert time.monotonic() < deadline, "the job never started"
                assert caller.poll() is None, "the caller ended before its job"
                time.sleep(0.05)
        finally:
            caller.kill()
            caller.wait()
        deadline = time.monotonic() + 3  # well under the job's own 60 s timeout
        while processes_with(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = processes_with(mark)
        for path in caller.stdout.read().decode().split():
            remove_tree(path)
        caller.stdout.close()
        assert left == []


class TestPreviousJob:
    LEAVE = code("""
        import os, sys, linecache
        os.environ["LEFT"] = "TOKEN"
        sys.modules["json"] = "TOKEN"
        linecache.cache["<left>"] = (5, None, ["TOKEN"], "<left>")
        open("left.txt", "w").write("TOKEN")
        os.symlink("/usr", "link")
        os.mkfifo("fifo")
        if os.fork() == 0:                            # keeps writing after the job returns
            import time
            for i in range(100):
                try:
                    open(f"late{i}", "w").write("TOKEN")
                except OSError:
                    pass
                time.sleep(0.01)
            os._exit(0)
        sys.stdout.write("z" * 0x314159)              # the output's size and the exit status are
        sys.stdout.flush()                            # what a worker learns of a job: a channel
        raise SystemExit(0x5A)
        """)
    LOOK = code("""
        import ctypes, gc, os, struct, sys, linecache
        print("env", "LEFT" in os.environ, "mod", sys.modules.get("json") == "TOKEN",
              "line", "<left>" in linecache.cache, "dir", sorted(os.listdir(".")))
        # Every readable page near the heap, read through a pipe (EFAULT, not a crash, if unmapped):
        # the last job's answer to the worker (exit status and output size) must not be in it more
        # often than a value no job used.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
        r, w = os.pipe()
        def needles(size):
            return [struct.pack(">BqBQ", 1, 0x5A, 0, size)]  # the head of the worker's answer
        counts = {"used": 0, "unused": 0}
        pages = set()
        for base in {id(o) & ~0xFFFFF for o in gc.get_objects()[:4000]}:
            for off in range(-4 << 20, 4 << 20, 4096):
                pages.add(base + off)
        for page in pages:
            if page <= 0 or libc.write(w, page, 4096) != 4096:
                continue
            data = os.read(r, 4096)
            for key, size in (("used", 0x314159), ("unused", 0x314161)):
                counts[key] += sum(needle in data for needle in needles(size))
        print("counts", counts["used"] - counts["unused"])
        """)

    def test_nothing_of_the_last_job_is_left_in_its_env_modules_dir_or_memory(self, run: Runner):
        first = run(self.LEAVE)
        assert first.exit_code == 0x5A, first
        look = run(self.LOOK, timeout_s=30)
        assert look.exit_code == 0, look
        assert look.stdout == "env False mod False line False dir []\ncounts 0\n", look.stdout


def _held_abstract_name() -> tuple[socket.socket, bytes]:
    name = b"\0retryctl-attack-" + uuid.uuid4().hex.encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(name)
    return sock, name


class TestIpcAndSockets:
    def test_no_name_is_bound_no_queue_opened_no_kernel_socket_made(self, run: Runner):
        """A bound abstract name would live in the Landlock tier's network namespace, the host's: it
        could squat a host service's name, or take what host processes send to it."""
        held, name = _held_abstract_name()
        fresh = b"\0retryctl-attack-" + uuid.uuid4().hex.encode()
        with held:
            res = run(
                code(f"""
                import ctypes, errno, os, socket
                libc = ctypes.CDLL(None, use_errno=True)
                def attempt(what, act):
                    try:
                        act()
                        print("DONE", what)
                    except OSError as exc:
                        print("refused", what, errno.errorcode.get(exc.errno))
                for target in ({name!r}, {fresh!r}, "sock"):
                    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                        a, b = socket.socketpair(socket.AF_UNIX, kind)
                        attempt(f"bind {{target!r}}", lambda: a.bind(target))
                attempt("listen", lambda: socket.socketpair()[0].listen(1))
                attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
                attempt("packet", lambda: socket.socket(17, socket.SOCK_RAW, 0))
                attempt("netlink pair", lambda: socket.socketpair(socket.AF_NETLINK))
                attempt("shm_open", lambda: os.open("/dev/shm/retryctl-attack", os.O_CREAT | os.O_RDWR))
                mq = libc.syscall(240, b"retryctl-attack", 0o100 | 2, 0o600, None)
                print("mq", mq)
                ring = libc.syscall(425, 8, ctypes.create_string_buffer(120))
                print("io_uring", ring)
                """)
            )
        assert res.exit_code == 0, res
        assert "DONE" not in res.stdout, res.stdout
        assert "EADDRINUSE" not in res.stdout, "the job sees the host's abstract names: " + res.stdout
        assert "mq -1\n" in res.stdout and "io_uring -1\n" in res.stdout, res.stdout
        assert not os.path.exists("/dev/shm/retryctl-attack")
        assert not os.path.exists("/dev/mqueue/retryctl-attack")
        # The fresh name is free on the host: the job did not take it.
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
            probe.bind(fresh)

    def test_a_name_the_kernel_picks_is_not_in_the_host_network_namespace(self, run: Runner):
        """``SO_PASSCRED`` makes the kernel bind a socketpair socket to a random abstract name when it
        sends (autobind): that name must not appear among the host's sockets."""
        job = code("""
            import socket, time
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            a.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            a.send(b"x")
            print(a.getsockname()[1:].decode(), flush=True)
            time.sleep(1)
            """)
        done: dict[str, object] = {}
        worker = threading.Thread(target=lambda: done.update(res=run(job, timeout_s=10)))
        worker.start()
        snapshots = []
        while worker.is_alive():
            with open("/proc/net/unix") as fh:
                snapshots.append(fh.read())
            time.sleep(0.05)
        worker.join()
        res = done["res"]
        assert isinstance(res, ExecResult) and res.exit_code == 0, res
        name = res.stdout.strip()
        assert len(name) == 5, res.stdout  # autobind names are five hex digits
        assert not any(f"@{name}\n" in snap for snap in snapshots)


class TestQuotas:
    FILL = code("""
        import os
        def attempt(what, act):
            try:
                print(what, act())
            except OSError as exc:
                print(what, "stopped", exc.errno)
        fds = []
        def falloc():
            n = 0
            for i in range(40):
                fds.append(os.open(f"fa{i}", os.O_CREAT | os.O_RDWR))
                os.posix_fallocate(fds[-1], 0, 3 << 20)   # allocated, never written
                n += 3
            return n
        def tmpfiles():
            for i in range(40):
                fds.append(os.open(".", os.O_TMPFILE | os.O_RDWR))
                os.write(fds[-1], b"x" * (3 << 20))
            return 120
        def through_proc():
            fds.append(os.open("gone", os.O_CREAT | os.O_RDWR))
            os.unlink("gone")
            fds.append(os.open(f"/proc/self/fd/{fds[-1]}", os.O_RDWR))
            for i in range(40):
                os.write(fds[-1], b"y" * (1 << 20))
        def empties():
            for i in range(6000):
                os.mkdir(f"d{i}")
        def links():
            open("l", "w").close()
            for i in range(6000):
                os.symlink("x" * 2000, f"s{i}")
        def stdout_room():
            os.posix_fallocate(1, 0, 64 << 20)
        def stderr_room():
            os.ftruncate(2, 1 << 40)
        for what, act in (("falloc", falloc), ("tmpfile", tmpfiles), ("proc", through_proc),
                          ("dirs", empties), ("symlinks", links), ("stdout", stdout_room),
                          ("stderr", stderr_room)):
            attempt(what, act)
            while fds:
                os.close(fds.pop())
            for name in os.listdir("."):
                (os.rmdir if os.path.isdir(name) and not os.path.islink(name) else os.unlink)(name)
        st = os.statvfs(".")
        print("used", (st.f_blocks - st.f_bfree) * st.f_frsize >> 20)
        """)

    def test_allocation_tmpfiles_proc_fds_dirs_and_symlinks_stay_in_the_quota(self, run: Runner):
        res = run(self.FILL, timeout_s=30)
        if res.killed_by == "disk_quota":
            return
        assert res.exit_code == 0, res
        lines = dict(line.split(" ", 1) for line in res.stdout.splitlines())
        for what in ("falloc", "tmpfile"):  # each would be 120 MiB against disk_mb=16
            assert lines[what].startswith("stopped"), res.stdout
        assert lines["proc"].startswith("stopped"), res.stdout
        assert lines["dirs"].startswith("stopped") and lines["symlinks"].startswith("stopped"), res.stdout
        assert lines["stdout"].startswith("stopped") and lines["stderr"].startswith("stopped"), res.stdout
        # The whole quota is free again for the same job once its files are gone...
        assert int(lines["used"]) <= 1, res.stdout
        # ...and for the next one.
        again = run("for i in range(3): open(f'f{i}', 'wb').write(b'x' * (4 << 20))\nprint('fits')")
        assert again.stdout == "fits\n", again


class TestMemory:
    def test_reserved_shared_and_threaded_mappings_stay_in_memory_mb(self, run: Runner):
        res = run(
            code("""
            import mmap, threading
            for name, flags in (("noreserve", mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000),
                                ("shared", mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)):
                try:
                    mmap.mmap(-1, 256 << 20, flags=flags)
                    print("MAPPED", name)
                except OSError:
                    print("refused", name)
            maps, stop = [], threading.Event()
            def hold():
                try:
                    maps.append(mmap.mmap(-1, 32 << 20))
                except OSError:
                    pass
                stop.wait()
            threads = []
            try:
                for _ in range(64):
                    threads.append(threading.Thread(target=hold))
                    threads[-1].start()
            except RuntimeError:
                pass
            print("MiB", 32 * len(maps))
            stop.set()
            """),
            memory_mb=128,
        )
        assert "MAPPED" not in res.stdout, res
        assert int(res.stdout.split()[-1]) <= 128, res


class TestRepermission:
    def test_system_files_devices_and_inherited_fds_keep_their_modes_and_times(self, run: Runner):
        watched = ["/dev/null", "/dev/zero", "/usr/bin/python3", "/usr/bin"]
        before = {path: (os.stat(path).st_mode, os.stat(path).st_mtime_ns, os.stat(path).st_uid)
                  for path in watched}  # fmt: skip
        res = run(
            code(f"""
            import os
            for path in {watched!r} + ["/", "/usr", "/dev", "/proc/self/fd/0"]:
                for how, act in (("chmod", lambda: os.chmod(path, 0o777)),
                                 ("utime", lambda: os.utime(path, (0, 0))),
                                 # "now" needs only write access, which every job has to /dev/null
                                 ("touch", lambda: os.utime(path, None)),
                                 ("chown", lambda: os.chown(path, os.getuid(), os.getgid())),
                                 ("fchmod", lambda: os.fchmod(os.open(path, os.O_RDONLY), 0o777))):
                    try:
                        act()
                        print("CHANGED", how, path)
                    except OSError:
                        pass
            for fd in (0, 3, 4, 5):
                try:
                    os.fchmod(fd, 0o777)
                    print("CHANGED fd", fd)
                except OSError:
                    pass
            print("done")
            """)
        )
        assert res.stdout.endswith("done\n"), res
        assert "CHANGED" not in res.stdout, res.stdout
        after = {path: (os.stat(path).st_mode, os.stat(path).st_mtime_ns, os.stat(path).st_uid)
                 for path in watched}  # fmt: skip
        assert after == before


class TestHostInformation:
    def test_no_host_names_paths_interfaces_or_cgroups(self, run: Runner):
        host_names = [name for _, name in socket.if_nameindex() if name != "lo"]
        res = run(
            code("""
            import os
            def read(path):
                try:
                    with open(path) as fh:
                        return fh.read()
                except OSError:
                    return ""
            print("uname", os.uname().nodename)
            print("ppid", os.getppid())
            try:
                print("root", sorted(os.listdir("/")))
            except OSError:
                print("root unreadable")
            for path in ("/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/sys/class/net",
                         "/etc/passwd", "/tmp", "/home", "/root", "/run"):
                print("exists" if os.path.lexists(path) else "absent", path)
            print("NET", read("/proc/net/dev").replace("\\n", " "))
            print("CGROUP", read("/proc/1/cgroup").replace("\\n", " "))
            print("MOUNTS", read("/proc/self/mountinfo").replace("\\n", " "))
            """)
        )
        assert res.exit_code == 0, res
        out = res.stdout
        assert "uname sandbox\n" in out, out
        assert "ppid 0\n" in out or "ppid 1\n" in out, out
        assert "exists" not in out, out
        root = out.split("root ", 1)[1].split("\n", 1)[0]
        assert root == "unreadable" or set(ast.literal_eval(root)) <= {
            "bin",
            "dev",
            "etc",
            "lib",
            "lib32",
            "lib64",
            "proc",
            "sbin",
            "usr",
            "work",
        }, root
        for name in host_names:
            assert name not in out, out
        cgroup = out.split("CGROUP", 1)[1].split("\n", 1)[0]
        assert all(line.endswith(":/") for line in cgroup.split()), cgroup
        mounts = out.split("MOUNTS", 1)[1]
        for host_path in (os.getcwd(), "/root", "/home", "/tmp"):
            assert f" {host_path} " not in mounts and f" {host_path}/" not in mounts, mounts


class TestLegitimateJobsStillWork:
    def test_devices_asyncio_threads_processes_and_files(self, run: Runner):
        res = run(
            code("""
            import asyncio, multiprocessing, os, subprocess, threading
            with open("/dev/null", "w") as fh:
                fh.write("x" * 1000)
            print(len(open("/dev/zero", "rb").read(8)), len(os.urandom(8)))
            print(asyncio.run(asyncio.sleep(0, result="loop")))
            seen = []
            threads = [threading.Thread(target=seen.append, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print(len(seen))
            child = multiprocessing.Process(target=print, args=("child",))
            child.start()
            child.join()
            done = subprocess.run(["/usr/bin/python3", "-c", "print(6 * 7)"], capture_output=True,
                                  text=True, check=True)
            print(done.stdout.strip())
            os.makedirs("a/b")
            with open("a/b/c.txt", "w") as fh:
                fh.write("kept")
            print(open("a/b/c.txt").read())
            """)
        )
        assert res.exit_code == 0, res
        assert res.stdout == "8 8\nloop\n8\nchild\n42\nkept\n", res.stdout
