"""The second attack suite (issue #17): every class that a second round of attacks got through, run on
both isolating tiers through both ``run_code`` and ``Sandbox().run``. Each attack is real code run in
the sandbox; the evidence is taken on the host wherever it can be (no process left, no IPC object, no
message received, host modes unchanged), else from a second job of the same pool."""

from __future__ import annotations

import os
import socket
import stat
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from retryctl.sandbox import Sandbox, Tier
from tests.sandbox.conftest import TEST_LIMITS, Runner, processes_with


def code(src: str) -> str:
    return textwrap.dedent(src).strip() + "\n"


def _sysv_objects() -> set[str]:
    """Every SysV shared memory segment, message queue and semaphore set on the host (key and id)."""
    found = set()
    for kind in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{kind}") as fh:
            found |= {f"{kind}:{' '.join(line.split()[:2])}" for line in fh.readlines()[1:]}
    return found


def _sandbox_dirs() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("retryctl-sandbox-")}


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory any uid may enter and write (as /dev/log's is): reaching it is up to the sandbox."""
    path = Path(tempfile.mkdtemp(prefix="retryctl-attack-", dir="/dev/shm"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        for child in path.iterdir():
            child.unlink()
        path.rmdir()


class TestSupervisor:
    def test_no_process_outlives_the_call_even_through_pid_1(self, run: Runner):
        marker = f"{uuid.uuid4().int % 10**6}.{os.getpid()}"
        res = run(
            code(f"""
            import os, subprocess
            me = os.getpid()
            try:  # the escape that worked: rewrite pid 1 (bwrap's init) through its memory
                with open("/proc/1/mem", "r+b", buffering=0) as mem:
                    print("OPENED pid 1" if me != 1 else "pid 1 is this job itself")
            except OSError as exc:
                print("denied /proc/1/mem", type(exc).__name__)
            for ppid in {{os.getppid(), 1}} - {{0, me}}:
                try:
                    open(f"/proc/{{ppid}}/mem", "r+b", buffering=0)
                    print("OPENED", ppid)
                except OSError:
                    pass
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execv("/usr/bin/sleep", ["sleep", "{marker}"])
                os._exit(0)
            subprocess.Popen(["/usr/bin/sleep", "{marker}"], start_new_session=True)
            print("left behind")
            """),
            timeout_s=5,
        )
        assert "OPENED" not in res.stdout, res
        assert res.stdout.endswith("left behind\n"), res
        assert processes_with(marker) == []

    def test_a_timed_out_job_leaves_nothing_running(self, run: Runner):
        marker = f"{uuid.uuid4().int % 10**6}.{os.getpid()}"
        res = run(
            code(f"""
            import os, time
            if os.fork() == 0:
                os.setsid()
                os.execv("/usr/bin/sleep", ["sleep", "{marker}"])
            time.sleep(60)
            """),
            timeout_s=0.5,
        )
        assert res.timed_out, res
        assert processes_with(marker) == []


class TestPreviousJob:
    FIND = code("""
        import gc, re, sys
        pattern = re.compile(r"TOKEN-[0-9a-f]{32}")
        found = set()
        def look(value):
            if isinstance(value, (bytes, bytearray)):
                value = bytes(value).decode("latin-1")
            if isinstance(value, str):
                found.update(pattern.findall(value))
        frame = sys._getframe()
        while frame is not None:  # up to the worker's loop, if there is one
            for value in list(frame.f_locals.values()) + list(frame.f_globals.values()):
                look(value)
                if isinstance(value, dict):
                    for item in list(value.values()) + list(value.keys()):
                        look(item)
                for attr in getattr(value, "__dict__", {}).values():
                    look(attr)
                    if isinstance(attr, (dict, list, tuple)):
                        for item in (attr.values() if isinstance(attr, dict) else attr):
                            look(item)
            frame = frame.f_back
        for obj in gc.get_objects():
            look(obj)
            if isinstance(obj, dict):
                for item in list(obj.values()):
                    look(item)
            elif isinstance(obj, (list, tuple)):
                for item in obj:
                    look(item)
        print(sorted(found))
        """)

    def test_code_files_and_output_of_the_last_job_are_not_reachable(self, run: Runner):
        secret = uuid.uuid4().hex
        first = run(
            f"data = 'TOKEN-{secret}'\nprint('TOKEN-{secret}')\n",
            files={"notes.txt": f"TOKEN-{secret}", f"TOKEN-{secret}.txt": b"x"},
        )
        assert secret in first.stdout
        second = run(self.FIND)
        assert second.exit_code == 0, second
        assert secret not in second.stdout, second.stdout


class TestIpc:
    ATTACK = code("""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        key = KEY
        shm = libc.shmget(key, 32 << 20, 0o1666)            # IPC_CREAT | 0666
        msg = libc.msgget(key, 0o1666)
        sem = libc.semget(key, 4, 0o1666)
        if shm >= 0:
            addr = libc.shmat(shm, None, 0)
        mq = -1
        try:
            rt = ctypes.CDLL("librt.so.1", use_errno=True)
            rt.mq_open.restype = ctypes.c_int
            mq = rt.mq_open(b"/retryctl-attack", 0o100 | 2, 0o666, None)  # O_CREAT | O_RDWR
        except OSError:
            pass
        seen = [libc.shmget(key, 0, 0), libc.msgget(key, 0), libc.semget(key, 0, 0)]
        print("created", shm, msg, sem, mq, "seen", *seen)
        """)

    def test_no_sysv_or_posix_ipc_object_is_created_or_crosses_jobs(self, run: Runner):
        before = _sysv_objects()
        key = uuid.uuid4().int % 2**30 + 1
        first = run(self.ATTACK.replace("KEY", str(key)))
        second = run(self.ATTACK.replace("KEY", str(key)))
        for res in (first, second):
            assert res.exit_code == 0, res
            created, seen = res.stdout.split("seen")
            assert created.split()[1:] == ["-1"] * 4, res.stdout
            assert seen.split() == ["-1"] * 3, res.stdout
        assert _sysv_objects() == before
        assert not os.path.exists("/dev/mqueue/retryctl-attack")


class TestQuotas:
    def test_an_unreadable_directory_hides_nothing_from_the_disk_quota(self, run: Runner):
        res = run(
            code("""
            import os
            os.mkdir("hidden")
            os.chmod("hidden", 0o300)      # write and search, no read: a directory scan sees nothing
            written = 0
            try:
                for i in range(64):
                    with open(f"hidden/f{i}", "wb") as fh:
                        for _ in range(4):
                            fh.write(b"x" * (1 << 20))
                            written += 1
            except OSError as exc:
                print("stopped", exc.strerror)
            print("MiB", written)
            """),
            timeout_s=20,
        )
        if res.killed_by != "disk_quota":
            assert int(res.stdout.split()[-1]) <= TEST_LIMITS.disk_mb, res

    def test_an_unreadable_directory_hides_nothing_from_the_file_count(self, run: Runner):
        res = run(
            code("""
            import os
            os.mkdir("hidden")
            os.chmod("hidden", 0o300)
            n = 0
            try:
                while n < 6000:
                    open(f"hidden/f{n}", "w").close()
                    n += 1
            except OSError as exc:
                print("stopped", exc.strerror)
            print("files", n)
            """),
            timeout_s=20,
        )
        if res.killed_by != "disk_quota":
            assert int(res.stdout.split()[-1]) <= TEST_LIMITS.max_files, res

    def test_unlinked_files_count_against_the_disk_quota(self, run: Runner):
        res = run(
            code("""
            import os
            fds, written = [], 0
            try:
                for i in range(40):
                    fd = os.open(f"gone{i}", os.O_CREAT | os.O_RDWR)
                    os.unlink(f"gone{i}")      # invisible to any directory walk
                    fds.append(fd)
                    for _ in range(3):
                        os.write(fd, b"x" * (1 << 20))
                        written += 1
            except OSError as exc:
                print("stopped", exc.strerror)
            print("MiB", written)
            """),
            timeout_s=20,
        )
        if res.killed_by != "disk_quota":
            assert int(res.stdout.split()[-1]) <= TEST_LIMITS.disk_mb, res

    def test_a_deep_unreadable_tree_is_cleaned_up(self, tier: Tier):
        deep = code("""
            import os
            os.chdir(os.getcwd())
            for i in range(2100):
                os.mkdir("d")
                os.chdir("d")
            for i in range(3):  # 9 MiB, down there
                with open(f"blob{i}", "wb") as fh:
                    fh.write(b"x" * (3 << 20))
            for i in range(2100):
                os.chdir("..")
                if i % 3 == 0:
                    os.chmod("d", 0o300)
            os.chmod("d", 0)
            print("deep")
            """)
        fill = "for i in range(3): open(f'fill{i}', 'wb').write(b'x' * (3 << 20))\nprint('filled')"
        limits = TEST_LIMITS.model_copy(update={"max_files": 5000})
        before = _sandbox_dirs()
        with Sandbox(tier=tier, limits=limits) as sandbox:
            first = sandbox.run(deep, timeout_s=30)
            assert first.stdout == "deep\n", first
            again = sandbox.run(fill)  # 9 + 9 MiB > disk_mb=16: only fits if the tree is gone
            assert again.stdout == "filled\n", again
            assert sandbox.run(deep, timeout_s=30).stdout == "deep\n"
        from retryctl.sandbox import run_code

        cold = run_code(deep, tier=tier, limits=limits, timeout_s=30)
        assert cold.stdout == "deep\n", cold
        assert _sandbox_dirs() <= before, "a worker's directory was left on the host"

    def test_memfd_does_not_escape_the_memory_limit(self, run: Runner):
        res = run(
            code("""
            import os
            total, fds = 0, []
            try:  # each memfd stays under max_file_mb; together they are far above memory_mb
                for i in range(48):
                    fd = os.memfd_create(f"m{i}")
                    fds.append(fd)
                    for _ in range(4):
                        os.write(fd, b"x" * (1 << 20))
                        total += 1
            except OSError as exc:
                print("stopped", exc.strerror)
            print("MiB", total)
            """),
            memory_mb=64,
            timeout_s=20,
        )
        assert int(res.stdout.split()[-1]) <= 64, res


class TestHostSockets:
    def test_no_datagram_or_stream_reaches_a_host_unix_socket(self, run: Runner, shared_dir: Path):
        dgram_path = str(shared_dir / "log")
        stream_path = str(shared_dir / "stream")
        abstract = b"\0retryctl-attack-" + uuid.uuid4().hex.encode()
        with (
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as dgram,
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as hidden,
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener,
        ):
            dgram.bind(dgram_path)
            hidden.bind(abstract)
            listener.bind(stream_path)
            listener.listen(4)
            for sock in (dgram, hidden, listener):
                sock.setblocking(False)
            for path in (dgram_path, stream_path):
                os.chmod(path, 0o777)
            res = run(
                code(f"""
                import socket
                for target in ({dgram_path!r}, {abstract!r}):
                    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
                    for how, send in (("sendto", lambda: a.sendto(b"owned", target)),
                                      ("sendmsg", lambda: a.sendmsg([b"owned"], [], 0, target)),
                                      ("connect", lambda: (a.connect(target), a.send(b"owned")))):
                        try:
                            send()
                            print("SENT", how, target)
                        except OSError as exc:
                            print("blocked", how, type(exc).__name__)
                s, _ = socket.socketpair()
                try:
                    s.connect({stream_path!r})
                    print("CONNECTED")
                except OSError as exc:
                    print("blocked stream", type(exc).__name__)
                """)
            )
            for sock in (dgram, hidden):
                with pytest.raises(BlockingIOError):
                    sock.recv(64)
            with pytest.raises(BlockingIOError):
                listener.accept()
        assert res.exit_code == 0, res
        assert "SENT" not in res.stdout and "CONNECTED" not in res.stdout, res.stdout


class TestSharedObjects:
    MARK = code("""
        import os
        targets = [".", "..", os.getcwd(), "/work", "/work/jobs", "/work/out", "/out",
                   os.path.dirname(os.getcwd()) + "/out", os.path.dirname(os.getcwd()) + "/jobs"]
        for path in targets:
            for how, act in (("chmod", lambda: os.chmod(path, 0o777)),
                             ("utime", lambda: os.utime(path, (0, 0))),
                             ("xattr", lambda: os.setxattr(path, "user.mark", b"1"))):
                try:
                    act()
                except OSError:
                    pass
        for how, act in (("fchmod", lambda: os.fchmod(1, 0o666)),
                         ("futime", lambda: os.utime(1, (0, 0))),
                         ("fxattr", lambda: os.setxattr(1, "user.mark", b"1"))):
            try:
                act()
            except OSError:
                pass
        print("marked")
        """)
    LOOK = code("""
        import os
        def xattr(target):
            try:
                return os.getxattr(target, "user.mark")
            except OSError:
                return None
        out = os.fstat(1)
        print(oct(os.stat(".").st_mode & 0o7777), oct(out.st_mode & 0o7777), int(out.st_mtime > 0),
              xattr("."), xattr(1))
        """)

    def test_marks_on_shared_dirs_and_output_files_do_not_reach_the_next_job_or_the_host(
        self, run: Runner, tier: Tier, request: pytest.FixtureRequest
    ):
        root = None
        if tier is Tier.LANDLOCK and "Sandbox" in request.node.callspec.id:
            sandbox: Sandbox = request.getfixturevalue("pool")
            root = sandbox._all[0]._root
        before = _host_modes(root) if root else None
        assert run(self.MARK).stdout == "marked\n"
        look = run(self.LOOK)
        assert look.exit_code == 0, look
        assert look.stdout == "0o700 0o600 1 None None\n", look.stdout
        if root:
            assert _host_modes(root) == before


def _host_modes(root: str) -> dict[str, tuple[int, int]]:
    """Mode and owner of a worker's host directory and what is in it (bar job dirs' contents)."""
    modes = {}
    for path in [root, *(os.path.join(root, name) for name in os.listdir(root))]:
        st = os.lstat(path)
        modes[path] = (stat.S_IMODE(st.st_mode), st.st_uid)
        assert not st.st_mode & 0o002, f"{path} is world-writable"
    return modes


class TestHostInformation:
    def test_no_host_pid_hostname_interface_or_watch(self, run: Runner):
        host_pid = os.getpid()
        names = [name for _, name in socket.if_nameindex() if name != "lo"]
        res = run(
            code(f"""
            import array, fcntl, os, socket, struct
            print("pid", os.getpid(), "ppid", os.getppid())
            for fn in (os.getsid, os.getpgid):
                try:
                    print("HOSTPID", fn({host_pid}))
                except OSError as exc:
                    print("nopid", type(exc).__name__)
            print("host", socket.gethostname())
            a, _ = socket.socketpair()
            buf = array.array("B", bytes(4096))
            try:
                fcntl.ioctl(a.fileno(), 0x8912, struct.pack("iL", 4096, buf.buffer_info()[0]))
                print("IFCONF", bytes(buf).replace(b"\\0", b" ").decode("latin-1"))
            except OSError as exc:
                print("noifconf", type(exc).__name__)
            try:
                import ctypes
                libc = ctypes.CDLL(None, use_errno=True)
                fd = libc.inotify_init1(0)
                watched = fd >= 0 and libc.inotify_add_watch(fd, b"/tmp", 0xFFF) >= 0
                print("INOTIFY" if watched else "noinotify")
            except OSError:
                print("noinotify")
            """)
        )
        assert res.exit_code == 0, res
        out = res.stdout
        assert "HOSTPID" not in out and "IFCONF" not in out and "INOTIFY" not in out, out
        assert f"pid {host_pid}" not in out
        assert "host sandbox\n" in out, out
        for name in names:
            assert name not in out, out

    def test_host_paths_cannot_even_be_stat_ed(self, run: Runner, shared_dir: Path):
        secret = shared_dir / "secret.txt"
        secret.write_text("HOST-" + uuid.uuid4().hex)
        secret.chmod(0o644)
        paths = [str(secret), str(shared_dir), "/root", "/home", "/tmp", "/etc/passwd", "/run", "/var"]
        res = run(
            code(f"""
            import os
            try:
                print("READ", open({str(secret)!r}).read())
            except OSError as exc:
                print("denied", type(exc).__name__)
            print("VISIBLE", [path for path in {paths!r} if os.path.lexists(path)])
            """)
        )
        assert "READ" not in res.stdout and "HOST-" not in res.stdout, res
        assert "VISIBLE []" in res.stdout, res.stdout


class TestWithoutNamespaces:
    """Where user namespaces are refused, jobs get a directory under the worker's ``jobs/``: its
    usage is walked and it is deleted after the job, whatever the job did to it."""

    @pytest.fixture
    def plain_pool(self, tier: Tier, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
        from retryctl.sandbox import _worker

        config = _worker.WorkerProcess._config

        def without_namespaces(self: _worker.WorkerProcess, root: str) -> dict[str, object]:
            return dict(config(self, root), isolate=False)

        monkeypatch.setattr(_worker.WorkerProcess, "_config", without_namespaces)
        limits = TEST_LIMITS.model_copy(update={"max_files": 5000})
        with Sandbox(tier=tier, limits=limits) as sandbox:
            yield sandbox

    def test_an_unreadable_directory_is_counted(self, plain_pool: Sandbox):
        res = plain_pool.run(
            code("""
            import os, time
            os.mkdir("hidden")
            for n in range(6000):
                open(f"hidden/f{n}", "w").close()
            os.chmod("hidden", 0o300)
            time.sleep(10)
            """),
            timeout_s=8,
        )
        assert res.killed_by == "disk_quota", res
        assert plain_pool.run("import os; print(os.listdir('.'))").stdout == "[]\n"

    def test_a_deep_unreadable_tree_is_deleted(self, plain_pool: Sandbox):
        deep = code("""
            import os
            for i in range(2100):
                os.mkdir("d")
                os.chdir("d")
            for i in range(3):  # 9 MiB, down there
                open(f"blob{i}", "wb").write(b"x" * (3 << 20))
            for i in range(2100):
                os.chdir("..")
                os.chmod("d", 0o300 if i % 2 else 0)
            print("deep")
            """)
        first = plain_pool.run(deep, timeout_s=30)
        assert first.stdout == "deep\n", first
        # 9 + 9 MiB > disk_mb=16 (the Landlock tier's directory is polled against it): fits only
        # once the tree is gone.
        fill = "for i in range(3): open(f'fill{i}', 'wb').write(b'x' * (3 << 20))\nprint('filled')"
        assert plain_pool.run(fill).stdout == "filled\n"
        root = plain_pool._all[0]._root
        if root is not None:  # the Landlock tier's directory is on the host: nothing is left in it
            assert "1" not in os.listdir(f"{root}/jobs")  # the deep job's
