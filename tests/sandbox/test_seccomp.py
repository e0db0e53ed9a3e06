"""The seccomp programs, installed for real in a child interpreter and probed syscall by syscall."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap

import pytest

from retryctl.sandbox._seccomp import base_filter, guard_filter, seccomp_arch

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or seccomp_arch() != "x86_64", reason="syscall numbers checked on x86_64"
)

_PRELUDE = """
import ctypes, errno, os, socket, subprocess, threading
from retryctl.sandbox._inside_os import PR_SET_NO_NEW_PRIVS, prctl, seccomp_install
libc = ctypes.CDLL(None, use_errno=True)
def outcome(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
def raw(nr, *args):
    if libc.syscall(nr, *args) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
prctl(PR_SET_NO_NEW_PRIVS, 1)
"""


def probe(body: str) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(body)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.split())


class TestBaseFilter:
    def test_program_is_whole_instructions(self):
        program = base_filter()
        assert len(program) % 8 == 0 and 0 < len(program) // 8 < 4096

    def test_blocks_network_namespaces_and_ptrace_but_not_exec(self):
        got = probe(
            f"""
            seccomp_install({base_filter()!r})
            print("socket_inet=" + outcome(lambda: socket.socket(socket.AF_INET)))
            print("socket_unix=" + outcome(lambda: socket.socket(socket.AF_UNIX)))
            print("socketpair=" + outcome(lambda: socket.socketpair()))
            print("unshare_user=" + outcome(lambda: raw(272, 0x10000000)))
            print("clone_newnet=" + outcome(lambda: raw(56, 0x40000000 | 17, 0, 0, 0, 0)))
            print("ptrace=" + outcome(lambda: raw(101, 16, os.getppid(), 0, 0)))
            print("io_uring=" + outcome(lambda: raw(425, 1, 0)))
            print("bpf=" + outcome(lambda: raw(321, 0, 0, 0)))
            print("exec=" + ("ok" if subprocess.run(["/bin/true"]).returncode == 0 else "fail"))
            t = threading.Thread(target=lambda: None); t.start(); t.join()
            print("thread=ok")
            """
        )
        assert got == {
            "socket_inet": "EACCES", "socket_unix": "EACCES", "socketpair": "ok",
            "unshare_user": "EPERM", "clone_newnet": "EPERM", "ptrace": "EPERM",
            "io_uring": "EPERM", "bpf": "EPERM", "exec": "ok", "thread": "ok",
        }  # fmt: skip


class TestGuardFilter:
    def test_offsets_point_at_zeroed_comparisons(self):
        guard = guard_filter()
        for offset in guard.pid_offsets + guard.neg_pid_offsets:
            code, _, _, k = struct.unpack_from("<HBBI", guard.program, offset - 4)
            assert code == 0x15 and k == 0  # BPF_JMP|BPF_JEQ|BPF_K awaiting the pid

    def test_refuses_signals_to_the_guarded_pid_only(self):
        guard = guard_filter()
        got = probe(
            f"""
            import struct, signal
            program = bytearray({guard.program!r})
            ppid = os.getppid()
            for off in {guard.pid_offsets!r}:
                struct.pack_into("<I", program, off, ppid)
            for off in {guard.neg_pid_offsets!r}:
                struct.pack_into("<I", program, off, (-ppid) & 0xFFFFFFFF)
            seccomp_install(bytes(program))
            child = subprocess.Popen(["/bin/sleep", "30"])
            print("kill_parent=" + outcome(lambda: os.kill(ppid, 0)))
            print("kill_parent_group=" + outcome(lambda: os.kill(-ppid, 0)))
            print("kill_all=" + outcome(lambda: os.kill(-1, 0)))
            print("kill_parent_raw32=" + outcome(lambda: raw(62, ctypes.c_uint32(ppid), 0)))
            print("pidfd_parent=" + outcome(lambda: os.pidfd_open(ppid)))
            print("kill_child=" + outcome(lambda: os.kill(child.pid, signal.SIGKILL)))
            child.wait()
            """
        )
        assert got == {
            "kill_parent": "EPERM", "kill_parent_group": "EPERM", "kill_all": "EPERM",
            "kill_parent_raw32": "EPERM", "pidfd_parent": "EPERM", "kill_child": "ok",
        }  # fmt: skip


class TestBaseFilterRound2:
    def test_blocks_ipc_memfd_host_sockets_interface_ioctls_watches_and_xattrs(self, tmp_path):
        target = tmp_path / "f"
        target.write_text("x")
        got = probe(
            f"""
            import array, fcntl, struct
            seccomp_install({base_filter()!r})
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            print("shmget=" + outcome(lambda: raw(29, 0, 4096, 0o1600)))
            print("msgget=" + outcome(lambda: raw(68, 0, 0o1600)))
            print("semget=" + outcome(lambda: raw(64, 0, 1, 0o1600)))
            print("mq_open=" + outcome(lambda: raw(240, b"/x", 0o100 | 2, 0o600, 0)))
            print("memfd=" + outcome(lambda: os.memfd_create("m")))
            print("sendto_addr=" + outcome(lambda: a.sendto(b"x", "/dev/log")))
            print("sendmsg=" + outcome(lambda: a.sendmsg([b"x"])))
            print("connect=" + outcome(lambda: a.connect("/dev/log")))
            print("send=" + outcome(lambda: a.send(b"x")))
            print("recv=" + ("ok" if b.recv(8) == b"x" else "lost"))
            buf = array.array("B", bytes(256))
            print("ifconf=" + outcome(lambda: fcntl.ioctl(a.fileno(), 0x8912,
                                                            struct.pack("iL", 256, buf.buffer_info()[0]))))
            print("fionread=" + outcome(lambda: fcntl.ioctl(a.fileno(), 0x541B, b"0000")))
            print("inotify=" + outcome(lambda: raw(294, 0)))
            print("setxattr=" + outcome(lambda: os.setxattr({str(target)!r}, "user.x", b"1")))
            print("getxattr=" + outcome(lambda: os.listxattr({str(target)!r})))
            """
        )
        assert got == {
            "shmget": "EPERM", "msgget": "EPERM", "semget": "EPERM", "mq_open": "EPERM",
            "memfd": "EPERM", "sendto_addr": "EPERM", "sendmsg": "EPERM", "connect": "EPERM",
            "send": "ok", "recv": "ok", "ifconf": "EPERM", "fionread": "ok", "inotify": "EPERM",
            "setxattr": "EPERM", "getxattr": "ok",
        }  # fmt: skip


class TestBaseFilterRound3:
    def test_blocks_naming_a_socket_and_clearing_the_death_signal(self):
        got = probe(
            f"""
            seccomp_install({base_filter()!r})
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            print("bind_abstract=" + outcome(lambda: a.bind(b"\\0retryctl-probe")))
            print("listen=" + outcome(lambda: socket.socketpair()[0].listen(1)))
            print("pdeathsig=" + outcome(lambda: raw(157, 1, 0, 0, 0, 0)))
            print("dumpable=" + outcome(lambda: raw(157, 4, 0, 0, 0, 0)))
            print("socketpair=" + outcome(lambda: socket.socketpair()))
            """
        )
        assert got == {
            "bind_abstract": "EPERM", "listen": "EPERM", "pdeathsig": "EPERM", "dumpable": "ok",
            "socketpair": "ok",
        }  # fmt: skip


class TestBaseFilterRound4:
    def test_locks_are_no_ops_and_pinning_aio_and_owner_calls_are_refused(self, tmp_path):
        target = tmp_path / "locked"
        target.write_bytes(b"x")
        got = probe(
            f"""
            import fcntl, mmap
            # Started before the filter, so not under it: it tries the lock once told to.
            other = subprocess.Popen(["sh", "-c", "read go; flock -n {target} true; echo $?"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            seccomp_install({base_filter()!r})
            fh = open({str(target)!r}, "r+b")
            print("flock=" + outcome(lambda: fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)))
            print("lockf=" + outcome(lambda: fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)))
            print("getfl=" + outcome(lambda: fcntl.fcntl(fh, fcntl.F_GETFL)))
            print("setfl=" + outcome(lambda: fcntl.fcntl(fh, fcntl.F_SETFL, os.O_APPEND)))
            print("setlease=" + outcome(lambda: fcntl.fcntl(fh, 1024, fcntl.F_RDLCK)))
            print("setown=" + outcome(lambda: fcntl.fcntl(fh, fcntl.F_SETOWN, os.getpid())))
            print("setsig=" + outcome(lambda: fcntl.fcntl(fh, fcntl.F_SETSIG, 9)))
            print("vmsplice=" + outcome(lambda: raw(278, 1, 0, 0, 0)))
            print("io_setup=" + outcome(lambda: raw(206, 1, 0)))
            print("thp_on=" + outcome(lambda: raw(157, 41, 0, 0, 0, 0)))
            print("madv_huge=" + outcome(lambda: mmap.mmap(-1, 4 << 20).madvise(mmap.MADV_HUGEPAGE)))
            print("hugetlb=" + outcome(lambda: mmap.mmap(-1, 2 << 20, flags=mmap.MAP_PRIVATE
                                                        | mmap.MAP_ANONYMOUS | 0x40000)))
            print("mmap=" + outcome(lambda: mmap.mmap(-1, 2 << 20)))
            # The lock was never taken: a process outside the filter gets it while this one "holds" it.
            held = other.communicate("go\\n")[0].strip()
            print("host_flock=" + ("ok" if held == "0" else "blocked"))
            """
        )
        assert got == {
            "flock": "ok", "lockf": "ok", "getfl": "ok", "setfl": "ok", "setlease": "EPERM",
            "setown": "EPERM", "setsig": "EPERM", "vmsplice": "EPERM", "io_setup": "EPERM",
            "thp_on": "EPERM", "madv_huge": "ok", "hugetlb": "EPERM", "mmap": "ok", "host_flock": "ok",
        }  # fmt: skip
