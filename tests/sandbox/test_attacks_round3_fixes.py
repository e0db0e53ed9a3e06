"""The attacks of issue #30 that got through the first three suites, run again against the fixes, on
both isolating tiers through ``run_code`` and ``Sandbox().run`` (four modes). Each is a real attack on
the real kernel; the evidence is taken on the host where it can be (the host's lock table, a host
lock the job must not see or block on), else from what the kernel told the job."""

from __future__ import annotations

import ast
import fcntl
import os
import struct
import textwrap
import threading
import time
import uuid
from contextlib import nullcontext
from pathlib import Path

import pytest

from retryctl.sandbox import ExecResult, Sandbox, Tier, run_code
from retryctl.sandbox._launch import MASKED_PROC
from retryctl.sandbox._seccomp import seccomp_arch
from tests.sandbox.conftest import TEST_LIMITS, Runner

pytestmark = pytest.mark.skipif(seccomp_arch() != "x86_64", reason="syscall numbers are x86_64's")

_F_OFD_GETLK, _F_OFD_SETLK = 36, 37


def code(src: str) -> str:
    return textwrap.dedent(src).strip() + "\n"


def report(res: ExecResult) -> dict[str, object]:
    """The job's last stdout line, a dict literal."""
    assert res.exit_code == 0, res
    return ast.literal_eval(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def secret() -> int:
    return 1_000_000 + uuid.uuid4().int % 10**9


def lock_id(path: str) -> str:
    """How ``/proc/locks`` names a file: ``MAJOR:MINOR:INODE`` (hex device numbers)."""
    st = os.stat(path)
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"


class TestOutputIsNoHostFile:
    def test_stdout_and_stderr_cannot_be_grown_mapped_or_allocated_past_the_limits(self, run: Runner):
        res = run(
            code("""
            import ctypes, mmap, os
            libc = ctypes.CDLL(None, use_errno=True)
            libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
            got = {}
            for fd in (1, 2):
                for name, mode in (("keep_size", 1), ("insert_range", 0x20), ("plain", 0)):
                    for mib in (8, 256):  # past max_file_mb=4; past disk_mb=16 too
                        ok = libc.fallocate(fd, mode, 0, mib << 20) == 0
                        got[f"{name}{fd}_{mib}"] = "ok" if ok else os.strerror(ctypes.get_errno())
                try:
                    mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                    got[f"mmap{fd}"] = "ok"
                except (OSError, ValueError) as exc:
                    got[f"mmap{fd}"] = str(exc)
                got[f"size{fd}"] = os.fstat(fd).st_size
            print(got)
            """)
        )
        got = report(res)
        assert not [k for k, v in got.items() if v == "ok"], got
        assert all(int(str(got[f"size{fd}"])) <= TEST_LIMITS.max_output_bytes for fd in (1, 2)), got

    def test_re_flagging_stdio_still_returns_a_result_with_the_output(self, run: Runner):
        res = run(
            code("""
            import fcntl, os, sys
            for fd in (1, 2):
                flags = fcntl.fcntl(fd, fcntl.F_GETFL)
                fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT | os.O_APPEND | os.O_ASYNC)
                try:
                    fcntl.fcntl(fd, 1031, 4096)   # F_SETPIPE_SZ: as small as it goes
                except OSError:
                    pass
            os.write(1, b"out after O_DIRECT\\n")
            os.write(2, b"err after O_DIRECT\\n")
            fcntl.fcntl(1, fcntl.F_SETFL, fcntl.fcntl(1, fcntl.F_GETFL) | os.O_NONBLOCK)
            written = 0
            try:
                while written < 8 << 20:
                    written += os.write(1, b"y" * 65536)
            except BlockingIOError:
                pass
            """)
        )
        assert isinstance(res, ExecResult)
        assert res.stdout.startswith("out after O_DIRECT\n"), res
        assert res.stderr == "err after O_DIRECT\n", res

    def test_no_process_is_signalled_when_the_caller_reads_the_output(self, run: Runner):
        res = run(
            code("""
            import fcntl, os, signal
            got = {}
            fcntl.fcntl(1, fcntl.F_SETFL, fcntl.fcntl(1, fcntl.F_GETFL) | os.O_ASYNC)
            for name, cmd, arg in (("owner", fcntl.F_SETOWN, os.getppid()),
                                   ("owner_group", fcntl.F_SETOWN, -os.getpgrp()),
                                   ("signal", fcntl.F_SETSIG, int(signal.SIGKILL))):
                try:
                    fcntl.fcntl(1, cmd, arg)
                    got[name] = "set"
                except OSError as exc:
                    got[name] = exc.strerror
            print(got)
            """)
        )
        got = report(res)
        assert "set" not in got.values(), got

    def test_a_flood_stops_at_the_file_size_limit_and_is_flagged(self, run: Runner):
        res = run(
            code("""
            import os
            sent = 0
            try:
                while True:
                    sent += os.write(1, b"z" * 65536)
            except BrokenPipeError:
                os.write(2, f"stopped after {sent >> 20} MiB".encode())
            """),
            timeout_s=20,
        )
        assert not res.timed_out and res.stdout_truncated, res
        assert len(res.stdout) == TEST_LIMITS.max_output_bytes, res
        assert res.stderr.startswith("stopped after"), res
        assert int(res.stderr.split()[2]) <= TEST_LIMITS.max_file_mb, res


class TestPinnedMemory:
    def test_vmsplice_of_huge_pages_into_pipes_is_refused(self, run: Runner):
        res = run(
            code("""
            import ctypes, mmap, os
            libc = ctypes.CDLL(None, use_errno=True)
            class IoVec(ctypes.Structure):
                _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
            pinned, errors, pipes = 0, set(), []
            r, w = os.pipe()
            for i in range(96):                  # 96 huge pages: 192 MiB against memory_mb=64
                if i % 16 == 0:
                    r, w = os.pipe()
                    pipes.append((r, w))
                area = mmap.mmap(-1, 4 << 20)
                area.madvise(mmap.MADV_HUGEPAGE)
                base = ctypes.addressof(ctypes.c_char.from_buffer(area))
                page = (base + (2 << 20) - 1) & ~((2 << 20) - 1)
                ctypes.memset(page, 1, 2 << 20)
                iov = IoVec(page, 4096)
                if libc.vmsplice(w, ctypes.byref(iov), 1, 0) == 4096:
                    pinned += 1
                else:
                    errors.add(os.strerror(ctypes.get_errno()))
                del iov
                try:
                    area.close()
                except BufferError:
                    pass
            print({"pinned": pinned, "errors": sorted(errors)})
            """),
            memory_mb=64,
        )
        got = report(res)
        assert got["pinned"] == 0, got

    def test_no_transparent_huge_pages_for_the_job_or_what_it_executes(self, run: Runner):
        res = run(
            code("""
            import ctypes, mmap, os, subprocess
            libc = ctypes.CDLL(None, use_errno=True)
            got = {"off": libc.prctl(42, 0, 0, 0, 0)}          # PR_GET_THP_DISABLE
            got["switch_on"] = libc.prctl(41, 0, 0, 0, 0)      # PR_SET_THP_DISABLE 0
            got["off_after"] = libc.prctl(42, 0, 0, 0, 0)
            area = mmap.mmap(-1, 16 << 20)
            area.madvise(mmap.MADV_HUGEPAGE)
            for i in range(0, 16 << 20, 4096):
                area[i] = 1
            try:
                with open("/proc/self/smaps_rollup") as fh:
                    got["huge_kb"] = [int(line.split()[1]) for line in fh
                                      if line.startswith("AnonHugePages")][0]
            except OSError:
                got["huge_kb"] = 0                               # no /proc here (Landlock tier)
            got["child_off"] = int(subprocess.run(
                ["/usr/bin/python3", "-c", "import ctypes; print(ctypes.CDLL(None).prctl(42,0,0,0,0))"],
                capture_output=True, text=True, check=True).stdout)
            print(got)
            """)
        )
        got = report(res)
        assert got["off"] == 1 and got["off_after"] == 1 and got["child_off"] == 1, got
        assert got["switch_on"] == -1 and got["huge_kb"] == 0, got


class TestGlobalKernelTables:
    def test_aio_contexts_are_refused(self, run: Runner):
        res = run(
            code("""
            import ctypes, os
            libc = ctypes.CDLL(None, use_errno=True)
            held = 0
            for _ in range(16):                  # 16 x 4096 = the whole default fs.aio-max-nr
                ctx = ctypes.c_ulong(0)
                if libc.syscall(206, 4096, ctypes.byref(ctx)) == 0:   # io_setup
                    held += 1
            print({"held": held})
            """)
        )
        assert report(res) == {"held": 0}, res

    def test_every_other_kind_of_global_kernel_object_is_refused(self, run: Runner):
        res = run(
            code("""
            import ctypes, os
            libc = ctypes.CDLL(None, use_errno=True)
            calls = {
                "msgget": (68, 0, 0o1600), "semget": (64, 0, 4, 0o1600), "shmget": (29, 0, 4096, 0o1600),
                "add_key": (248, b"user", b"k", b"v", 1, -2), "keyctl": (250, 0, -2, 1),
                "inotify_init1": (294, 0), "fanotify_init": (300, 0, 0), "userfaultfd": (323, 0),
                "perf_event_open": (298, 0, 0, -1, -1, 0), "bpf": (321, 0, 0, 0),
                "memfd_secret": (447, 0), "memfd_create": (319, b"m", 0),
                "mq_open": (240, b"q", 0o100, 0o600, 0),
                "io_uring_setup": (425, 4, 0), "io_setup": (206, 1, 0),
            }
            made = {}
            for name, (nr, *args) in calls.items():
                if libc.syscall(nr, *args) >= 0:
                    made[name] = "made"
            print(made)
            """)
        )
        assert report(res) == {}, res


def _flock_struct(kind: int, start: int, length: int) -> bytes:
    return struct.pack("hhqqi", kind, os.SEEK_SET, start, length, 0)


class TestLocks:
    def test_the_job_neither_sees_nor_blocks_on_host_locks(self, run: Runner, tmp_path: Path):
        where = secret()
        python = open("/usr/bin/python3", "rb")  # noqa: SIM115
        null = os.open("/dev/null", os.O_RDWR)
        try:
            fcntl.flock(python, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(null, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, where)
            fcntl.fcntl(python, _F_OFD_SETLK, _flock_struct(fcntl.F_RDLCK, where + 7, 1))
            res = run(
                code("""
                import fcntl, os, struct
                got = {}
                with open("/usr/bin/python3", "rb") as fh:
                    try:
                        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        got["flock"] = "taken"
                    except OSError as exc:
                        got["flock"] = exc.strerror
                    probe = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
                    got["ofd"] = struct.unpack("hhqqi", fcntl.fcntl(fh, 36, probe))[:3]
                fd = os.open("/dev/null", os.O_RDWR)
                probe = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
                got["posix"] = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, probe))[:3]
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 0, 0)
                    got["lockf"] = "taken"
                except OSError as exc:
                    got["lockf"] = exc.strerror
                print(got)
                """)
            )
        finally:
            python.close()
            os.close(null)
        got = report(res)
        assert got["flock"] == "taken" and got["lockf"] == "taken", got
        assert where not in got["ofd"] and where + 7 not in got["ofd"], got  # type: ignore[operator]
        assert where not in got["posix"], got  # type: ignore[operator]

    def test_a_jobs_locks_never_reach_the_host_lock_table(self, run: Runner):
        where = secret()
        ids = {lock_id("/dev/null"), lock_id("/usr/bin/python3")}
        seen: list[str] = []
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                with open("/proc/locks") as fh:
                    seen.extend(line for line in fh if any(f" {i} " in line for i in ids))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            res = run(
                code(f"""
                import fcntl, os, struct, time
                fd = os.open("/dev/null", os.O_RDWR)
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, {where})
                fcntl.fcntl(fd, 37, struct.pack("hhqqi", fcntl.F_WRLCK, 0, {where + 3}, 1, 0))
                python = open("/usr/bin/python3", "rb")
                fcntl.flock(python, fcntl.LOCK_SH | fcntl.LOCK_NB)
                print("held")
                time.sleep(1.5)
                """),
                timeout_s=10,
            )
        finally:
            done.set()
            watcher.join()
        assert res.stdout == "held\n", res
        assert seen == [], seen

    @pytest.mark.parametrize("entry", ["run_code", "two-worker pool"])
    def test_no_channel_between_two_jobs_through_lock_offsets(self, tier: Tier, entry: str):
        value = secret() & 0xFF_FFFF_FFFF  # 40 bits
        sender = code(f"""
            import fcntl, os, time
            fd = os.open("/dev/null", os.O_RDWR)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, {value})
            time.sleep(3)
            """)
        receiver = code("""
            import fcntl, os, struct, time
            fd = os.open("/dev/null", os.O_RDWR)
            seen = set()
            end = time.monotonic() + 2.5
            while time.monotonic() < end:
                probe = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
                kind, _, start = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, probe))[:3]
                if kind != fcntl.F_WRLCK or start:
                    seen.add(start)
                time.sleep(0.01)
            print(sorted(seen))
            """)
        results: list[ExecResult] = []
        pooled = entry != "run_code"
        with Sandbox(tier=tier, workers=2, limits=TEST_LIMITS) if pooled else nullcontext() as pool:

            def run_one(job: str) -> ExecResult:
                if pool is None:
                    return run_code(job, tier=tier, limits=TEST_LIMITS, timeout_s=10)
                return pool.run(job, timeout_s=10)

            sending = threading.Thread(target=lambda: results.append(run_one(sender)))
            sending.start()
            time.sleep(0.3)
            got = run_one(receiver)
            sending.join()
        assert results[0].ok, results
        assert str(value) not in got.stdout, got

    def test_host_wide_proc_tables_are_hidden(self, run: Runner, tmp_path: Path):
        where = secret()
        target = tmp_path / "locked"
        target.write_bytes(b"x")
        with open(target, "r+b") as fh:
            fcntl.fcntl(fh, _F_OFD_SETLK, _flock_struct(fcntl.F_WRLCK, where, 1))
            res = run(
                code(f"""
                got = {{}}
                for path in {MASKED_PROC!r}:
                    try:
                        with open(path) as fh:
                            got[path] = fh.read()
                    except OSError as exc:
                        got[path] = ""
                print(got)
                """)
            )
        got = report(res)
        assert str(where) not in res.stdout, res
        assert all(text == "" for text in got.values()), got

    def test_stdlib_users_of_locks_still_work(self, run: Runner):
        res = run(
            code("""
            import fcntl, logging, sqlite3, tempfile
            db = sqlite3.connect("work.db")
            db.execute("create table t (x)")
            db.executemany("insert into t values (?)", [(i,) for i in range(100)])
            db.commit()
            again = sqlite3.connect("work.db")
            total = again.execute("select sum(x) from t").fetchone()[0]
            logging.basicConfig(filename="log.txt")
            logging.warning("logged")
            with tempfile.NamedTemporaryFile() as fh:
                fcntl.lockf(fh, fcntl.LOCK_EX)
                fh.write(b"locked")
            print({"sum": total, "log": open("log.txt").read().strip()})
            """)
        )
        assert report(res) == {"sum": 4950, "log": "WARNING:root:logged"}, res
