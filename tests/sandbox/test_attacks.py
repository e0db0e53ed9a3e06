"""The attack suite: each attack runs through the real sandbox, on both isolating tiers, through both
``run_code`` and ``Sandbox().run``, and asserts that it was blocked. Evidence is taken on the host side
wherever it can be (the listener saw nobody, the file does not exist, no process is left)."""

from __future__ import annotations

import os
import socket
import textwrap
import uuid
from pathlib import Path

import pytest

from retryctl.exceptions import ConfigError
from retryctl.sandbox import Sandbox, Tier
from tests.sandbox.conftest import TEST_LIMITS, Runner, processes_with


def code(src: str) -> str:
    return textwrap.dedent(src).strip() + "\n"


class TestSecrets:
    def test_caller_environment_is_not_visible(self, run: Runner, monkeypatch: pytest.MonkeyPatch):
        secret = "s3cret-" + uuid.uuid4().hex
        monkeypatch.setenv("RETRYCTL_TEST_SECRET", secret)
        res = run(
            code("""
            import os
            print(dict(os.environ))
            for path in ("/proc/self/environ", "/proc/1/environ", f"/proc/{os.getppid()}/environ"):
                try:
                    print(open(path, "rb").read())
                except OSError as exc:
                    print("denied", path, exc.errno)
            """)
        )
        assert res.exit_code == 0, res.stderr
        assert secret not in res.stdout
        assert "RETRYCTL_TEST_SECRET" not in res.stdout

    def test_home_root_and_host_files_are_not_readable(self, run: Runner, tmp_path: Path):
        secret_file = tmp_path / "secret.txt"
        secret_file.write_text("TOP-SECRET-" + uuid.uuid4().hex)
        targets = [str(secret_file), "/root", "/home", "/etc/shadow", "/etc/passwd", "/work/main"]
        res = run(
            code(f"""
            import os
            for path in {targets!r}:
                try:
                    if os.path.isdir(path):
                        print("LISTED", path, os.listdir(path))
                    else:
                        print("READ", path, open(path).read())
                except OSError as exc:
                    print("denied", path, type(exc).__name__)
            """)
        )
        assert res.exit_code == 0, res.stderr
        assert "TOP-SECRET" not in res.stdout
        assert "LISTED" not in res.stdout and "READ" not in res.stdout, res.stdout

    def test_caller_process_memory_is_not_readable(self, run: Runner):
        res = run(
            code(f"""
            try:
                print("READ", open("/proc/{os.getpid()}/mem", "rb").read(16))
            except (OSError, ValueError) as exc:
                print("denied", type(exc).__name__)
            """)
        )
        assert "READ" not in res.stdout and "denied" in res.stdout, res


class TestWritesOutside:
    def test_writes_outside_the_work_dir_fail(self, run: Runner, tmp_path: Path):
        host_target = tmp_path / "owned.txt"
        targets = [str(host_target), "/tmp/owned.txt", "/usr/owned.txt", "/etc/owned.txt",
                   "/root/owned.txt", "../owned.txt"]  # fmt: skip
        res = run(
            code(f"""
            for path in {targets!r}:
                try:
                    with open(path, "w") as fh:
                        fh.write("owned")
                    print("WROTE", path)
                except OSError as exc:
                    print("denied", path, type(exc).__name__)
            open("inside.txt", "w").write("fine")
            print(open("inside.txt").read())
            """)
        )
        assert "WROTE" not in res.stdout, res.stdout
        assert res.stdout.rstrip().endswith("fine"), "the work dir itself must stay writable"
        assert not host_target.exists()
        for path in ("/usr/owned.txt", "/etc/owned.txt", "/root/owned.txt"):
            assert not os.path.exists(path)


class TestNetwork:
    def test_no_connection_reaches_a_loopback_listener(self, run: Runner):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(8)
            listener.setblocking(False)
            port = listener.getsockname()[1]
            res = run(
                code(f"""
                import socket
                for family, addr in ((socket.AF_INET, ("127.0.0.1", {port})),
                                     (socket.AF_INET6, ("::1", {port}))):
                    try:
                        s = socket.socket(family, socket.SOCK_STREAM)
                        s.settimeout(1)
                        s.connect(addr)
                        print("CONNECTED", addr)
                    except OSError as exc:
                        print("blocked", type(exc).__name__)
                try:
                    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {port}))
                    print("SENT")
                except OSError as exc:
                    print("blocked udp", type(exc).__name__)
                """),
                timeout_s=5,
            )
            with pytest.raises(BlockingIOError):
                listener.accept()
        assert "CONNECTED" not in res.stdout and "SENT" not in res.stdout, res.stdout
        assert res.stdout.count("blocked") == 3, res


class TestBombs:
    def test_fork_bomb_is_capped(self, run: Runner):
        res = run(
            code("""
            import os, time
            n = 0
            try:
                while n < 10000:
                    if os.fork() == 0:
                        time.sleep(60)
                        os._exit(0)
                    n += 1
            except OSError as exc:
                print("blocked after", n)
            """),
            timeout_s=10,
        )
        assert "blocked after" in res.stdout, res
        forked = int(res.stdout.split()[-1])
        assert forked <= TEST_LIMITS.nproc

    def test_thread_bomb_is_capped(self, run: Runner):
        res = run(
            code("""
            import threading, time
            stop = threading.Event()
            threads = []
            try:
                while len(threads) < 10000:
                    t = threading.Thread(target=stop.wait, daemon=True)
                    t.start()
                    threads.append(t)
            except (RuntimeError, MemoryError) as exc:
                print("blocked after", len(threads))
            stop.set()
            """),
            timeout_s=4,
        )
        # Either start() failed cleanly, or a thread died of MemoryError during its start-up and
        # CPython's start() then waits for it forever: the timeout kills the job. Both are blocked.
        if res.timed_out:
            assert res.killed_by == "timeout" and res.exit_code < 0
        else:
            assert "blocked after" in res.stdout, res
            assert int(res.stdout.split()[-1]) <= TEST_LIMITS.nproc

    def test_memory_bomb_is_capped(self, run: Runner):
        res = run(
            code("""
            chunks = []
            try:
                while True:
                    chunks.append(bytearray(32 * 1024 * 1024))
            except MemoryError:
                print("blocked at", len(chunks) * 32, "MiB")
            """),
            memory_mb=128,
        )
        assert "blocked at" in res.stdout, res
        assert int(res.stdout.split()[2]) <= 128

    def test_disk_bomb_is_capped(self, run: Runner):
        res = run(
            code("""
            import os
            block = b"x" * (1 << 20)
            written = 0
            try:
                for i in range(1000):
                    with open(f"fill{i}.bin", "wb") as fh:
                        for _ in range(3):
                            fh.write(block)
                            written += 1
                print("WROTE", written)
            except OSError as exc:
                print("blocked after", written, "MiB", type(exc).__name__)
            """),
            timeout_s=20,
        )
        assert "WROTE" not in res.stdout, res
        blocked = "blocked after" in res.stdout or res.killed_by == "disk_quota"
        assert blocked, res
        if "blocked after" in res.stdout:
            assert int(res.stdout.split()[2]) <= TEST_LIMITS.disk_mb + 1

    def test_inode_bomb_is_capped(self, run: Runner):
        res = run(
            code("""
            n = 0
            try:
                while n < 200000:
                    open(f"f{n}", "w").close()
                    n += 1
                print("CREATED", n)
            except OSError as exc:
                print("refused after", n, exc.strerror)
            """),
            timeout_s=20,
        )
        assert "CREATED" not in res.stdout, res
        # The job's tmpfs has max_files (+ its root and one over, which the poll kills) inodes: the
        # kernel refuses the next one, or the poll kills the job first.
        if res.killed_by == "disk_quota":
            assert res.exit_code < 0, res
        else:
            assert res.stdout.startswith("refused after") and "No space left" in res.stdout, res
            assert int(res.stdout.split()[2]) <= TEST_LIMITS.max_files + 1, res

    def test_one_huge_file_is_capped(self, run: Runner):
        res = run(
            code("""
            import signal
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            written = 0
            try:
                with open("big.bin", "wb") as fh:
                    while written < 1000:
                        fh.write(b"x" * (1 << 20))
                        written += 1
                print("WROTE", written)
            except OSError as exc:
                print("blocked after", written, "MiB")
            """)
        )
        assert "blocked after" in res.stdout, res
        assert int(res.stdout.split()[2]) <= TEST_LIMITS.max_file_mb


class TestLeftovers:
    def test_a_messy_work_dir_is_cleaned_for_the_next_job(self, tier: Tier):
        mess = code("""
            import os
            os.makedirs("a/" * 200 + "end")
            for i in range(3):  # 9 MiB: a second helping fits the 16 MiB quota only if this is gone
                with open(f"a/blob{i}.bin", "wb") as fh:
                    fh.write(b"x" * (3 << 20))
            os.chmod("a", 0)
            print("messy")
            """)
        with Sandbox(tier=tier, limits=TEST_LIMITS) as sandbox:
            assert sandbox.run(mess).stdout == "messy\n"
            again = sandbox.run(mess)
        assert again.stdout == "messy\n", again

    def test_files_bigger_than_the_quota_are_refused(self, run: Runner):
        many = {f"f{i}.bin": b"x" * (3 << 20) for i in range(6)}  # 18 MiB > disk_mb=16
        with pytest.raises(ConfigError) as err:
            run("print('ran')", files=many)
        assert err.value.field == "files"
        with pytest.raises(ConfigError, match="max_file_mb"):
            run("print('ran')", files={"big.bin": b"x" * (5 << 20)})


class TestTimeouts:
    @pytest.mark.parametrize("body", ["while True: pass", "import time; time.sleep(60)"],
                             ids=["cpu-loop", "sleep"])  # fmt: skip
    def test_runaway_job_is_killed_at_the_timeout(self, run: Runner, body: str):
        res = run(code(body), timeout_s=1.0)
        assert res.timed_out and res.killed_by == "timeout"
        assert res.exit_code < 0
        assert res.duration_ms < 6000


class TestSignals:
    def test_job_cannot_signal_the_caller_or_its_worker(self, tier: Tier):
        with Sandbox(tier=tier, limits=TEST_LIMITS) as sandbox:
            first = sandbox.run("print(1)")
            res = sandbox.run(
                code(f"""
                import os, signal
                for pid in ({os.getpid()}, os.getppid(), -os.getppid(), 1, -1):
                    for sig in (signal.SIGKILL, signal.SIGSTOP):
                        try:
                            os.kill(pid, sig)
                            print("SIGNALLED", pid)
                        except OSError as exc:
                            print("blocked", pid, type(exc).__name__)
                try:
                    fd = os.pidfd_open(os.getppid())
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                    print("SIGNALLED via pidfd")
                except OSError as exc:
                    print("blocked pidfd", type(exc).__name__)
                """)
            )
            after = sandbox.run("print(2)")
            assert first.stdout == "1\n" and after.stdout == "2\n"
            assert sandbox.restarts == 0, "the worker survived: no restart was needed"
        assert "SIGNALLED" not in res.stdout, res.stdout

    def test_run_code_job_cannot_signal_the_caller(self, tier: Tier):
        from retryctl.sandbox import run_code

        res = run_code(
            code(f"""
            import os, signal
            for pid in ({os.getpid()}, -1):
                try:
                    os.kill(pid, signal.SIGKILL)
                    print("SIGNALLED", pid)
                except OSError as exc:
                    print("blocked", pid)
            """),
            tier=tier,
        )
        assert "SIGNALLED" not in res.stdout, res.stdout


class TestStragglers:
    def test_background_processes_die_with_the_job(self, run: Runner):
        marker = f"{uuid.uuid4().int % 10**6}.{os.getpid()}"
        res = run(
            code(f"""
            import os, subprocess
            subprocess.Popen(["/usr/bin/sleep", "{marker}"], start_new_session=True)
            if os.fork() == 0:          # a classic daemon: fork, setsid, fork again
                os.setsid()
                if os.fork() == 0:
                    os.execv("/usr/bin/sleep", ["sleep", "{marker}"])
                os._exit(0)
            print("left behind")
            """)
        )
        assert res.stdout == "left behind\n", res
        assert processes_with(marker) == []


class TestOutputFlood:
    @pytest.mark.parametrize("stream", ["stdout", "stderr"])
    def test_flood_is_capped(self, run: Runner, stream: str):
        res = run(
            code(f"""
            import sys
            line = "x" * 9999 + "\\n"
            while True:
                sys.{stream}.write(line)
            """),
            timeout_s=10,
        )
        kept = getattr(res, stream)
        assert getattr(res, f"{stream}_truncated")
        assert len(kept.encode()) <= TEST_LIMITS.max_output_bytes
        assert not res.timed_out, "the file-size limit must stop a flood long before the timeout"
