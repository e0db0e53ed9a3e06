"""The seccomp BPF programs the sandbox installs, assembled here in Python.

Why hand-written: the only kept Python bindings (``pyseccomp``) wrap the C library ``libseccomp`` through
ctypes, which a ``pip install`` cannot bring along, and the rules we need are a short list of syscalls
plus three argument checks. A program is a list of classic-BPF instructions over ``struct seccomp_data``
(``nr`` at offset 0, ``arch`` at 4, the six 64-bit arguments from 16).

Two programs:

* :func:`base_filter` (compiled once per process, passed to bwrap by fd or installed by the Landlock-tier
  worker): refuses ``socket()`` (no network, not even loopback), namespace and mount syscalls, ptrace and
  cross-process memory access, kernel-facing calls (bpf, perf, io_uring, keyrings, modules), terminal
  injection, IPC, memfds, naming or addressing a socket (``bind``, ``connect``, addressed sends) and
  clearing the death signal (``PR_SET_PDEATHSIG``) or switching transparent huge pages back on,
  ``vmsplice`` and hugetlb mappings (memory a pipe would pin unaccounted), aio (a host-wide table),
  leases, ``F_NOTIFY`` and ``F_SETOWN``/``F_SETSIG``; it turns every file lock into a no-op (the
  lock table is the host's). It never blocks ``execve``: a job may run ``/usr/bin/*`` programs.
* :func:`guard_filter`: a template stacked per job that refuses signals (and pidfds) aimed at the worker
  that forked the job, or at every process (``kill(-1)``); the worker writes its own pid at
  :attr:`GuardTemplate.pid_offsets` because only it knows its pid inside its pid namespace.
"""

from __future__ import annotations

import platform
import struct
from dataclasses import dataclass
from functools import cache

__all__ = ["GuardTemplate", "SeccompUnsupported", "base_filter", "guard_filter", "seccomp_arch", "syscall_nr"]

# Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_EPERM, _EACCES, _ENOSYS = 1, 13, 38

_OFF_NR, _OFF_ARCH = 0, 4


def _arg_lo(index: int) -> int:
    # Little-endian: the low 32 bits of argument ``index``. The kernel truncates pid_t, int flags and
    # ioctl request numbers to 32 bits, so the low word is what must be checked.
    return 16 + 8 * index


_CLONE_NEW_MASK = 0x7E020080  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWTIME
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_PR_SET_PDEATHSIG = 1
_PR_SET_THP_DISABLE = 41
_MAP_HUGETLB = 0x40000
_MADV_HUGEPAGE, _MADV_COLLAPSE = 14, 25
# fcntl commands that take or test a record lock (F_GETLK, F_SETLK, F_SETLKW, F_OFD_*): turned into
# no-ops. Refused: leases and directory notification (F_SETLEASE, F_GETLEASE, F_NOTIFY), and naming
# a process the kernel signals for the job when its fd becomes ready (F_SETOWN, F_SETSIG,
# F_SETOWN_EX): the reader of the job's stdout pipe would trigger it.
_LOCK_CMDS = (5, 6, 7, 36, 37, 38)
_LEASE_CMDS = (1024, 1025, 1026, 8, 10, 15)
_NOOP = 0x00050000  # SECCOMP_RET_ERRNO with errno 0: the call returns 0 and the kernel does nothing
_SIOC_FIRST, _SIOC_END = 0x8900, 0x8A00  # SIOCGIFCONF, SIOCGIFADDR...: network devices' config

# Syscall numbers per architecture (x86_64 from arch/x86/entry/syscalls; aarch64 is asm-generic).
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "socket": 41, "prctl": 157, "clone": 56, "clone3": 435, "ioctl": 16, "unshare": 272, "setns": 308,
            "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "ptrace": 101,
            "process_vm_readv": 310, "process_vm_writev": 311, "kexec_load": 246,
            "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
            "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
            "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
            "syslog": 103, "name_to_handle_at": 303, "open_by_handle_at": 304, "fsopen": 430,
            "fsconfig": 431, "fsmount": 432, "fspick": 433, "open_tree": 428, "move_mount": 429,
            "mount_setattr": 442, "kcmp": 312, "quotactl": 179, "sethostname": 170,
            "setdomainname": 171, "vhangup": 153, "pidfd_getfd": 438, "kill": 62, "tkill": 200,
            "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "pidfd_open": 434,
            "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65,
            "semctl": 66, "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
            "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243,
            "mq_notify": 244, "mq_getsetattr": 245, "memfd_create": 319, "memfd_secret": 447,
            "connect": 42, "bind": 49, "listen": 50, "sendto": 44, "sendmsg": 46, "sendmmsg": 307,
            "inotify_init": 253,
            "inotify_init1": 294, "inotify_add_watch": 254, "fanotify_init": 300,
            "fanotify_mark": 301, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190,
            "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "setxattrat": 463,
            "removexattrat": 466, "vmsplice": 278, "io_setup": 206, "io_destroy": 207,
            "io_getevents": 208, "io_submit": 209, "io_cancel": 210, "io_pgetevents": 333,
            "flock": 73, "fcntl": 72, "mmap": 9, "madvise": 28,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "socket": 198, "prctl": 167, "clone": 220, "clone3": 435, "ioctl": 29, "unshare": 97,
            "setns": 268,
            "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "ptrace": 117,
            "process_vm_readv": 270, "process_vm_writev": 271, "kexec_load": 104,
            "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
            "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217,
            "request_key": 218, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89,
            "syslog": 116, "name_to_handle_at": 264, "open_by_handle_at": 265, "fsopen": 430,
            "fsconfig": 431, "fsmount": 432, "fspick": 433, "open_tree": 428, "move_mount": 429,
            "mount_setattr": 442, "kcmp": 272, "quotactl": 60, "sethostname": 161,
            "setdomainname": 162, "vhangup": 58, "pidfd_getfd": 438, "kill": 129, "tkill": 130,
            "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "pidfd_open": 434,
            "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190, "semop": 193,
            "semctl": 191, "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188,
            "msgctl": 187, "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182,
            "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185, "memfd_create": 279,
            "memfd_secret": 447, "connect": 203, "bind": 200, "listen": 201, "sendto": 206,
            "sendmsg": 211, "sendmmsg": 269,
            "inotify_init1": 26, "inotify_add_watch": 27, "fanotify_init": 262,
            "fanotify_mark": 263, "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14,
            "lremovexattr": 15, "fremovexattr": 16, "setxattrat": 463, "removexattrat": 466,
            "vmsplice": 75, "io_setup": 0, "io_destroy": 1, "io_submit": 2, "io_cancel": 3,
            "io_getevents": 4, "io_pgetevents": 292, "flock": 32, "fcntl": 25, "mmap": 222,
            "madvise": 233,
        },
    ),
}  # fmt: skip

_DENIED = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "ptrace", "process_vm_readv",
    "process_vm_writev", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "reboot", "swapon", "swapoff", "acct",
    "syslog", "name_to_handle_at", "open_by_handle_at", "fsopen", "fsconfig", "fsmount", "fspick",
    "open_tree", "move_mount", "mount_setattr", "kcmp", "quotactl", "sethostname", "setdomainname",
    "vhangup", "pidfd_getfd",
    # SysV IPC and POSIX message queues: objects that would outlive the job and cross to the next
    # one through a shared IPC namespace (the Landlock tier's is the host's).
    "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop", "msgget",
    "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr",
    # Anonymous memory-backed files that RLIMIT_AS does not count (written, never mapped).
    "memfd_create", "memfd_secret",
    # socket() is refused, so the only sockets are socketpair()s: connect, sendmsg (whose address
    # seccomp cannot read) and sendto with an address would reach a host unix socket by path.
    "connect", "sendmsg", "sendmmsg",
    # A socketpair() socket can still be bound: to an abstract name that would live in the Landlock
    # tier's network namespace (the host's), where it could squat a host service's name or receive
    # what host processes send to it. No job needs a name on an already connected socket.
    "bind", "listen",
    # Watching host paths (Landlock does not govern inotify), and extended attributes, a channel
    # between jobs through anything they share (shutil.copy2 takes EPERM as "not supported").
    "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "setxattrat", "removexattrat",
    # Memory a job could hold that no limit of its own counts: vmsplice pins the user pages it
    # hands a pipe (a 4 KiB splice of a huge page pins all 2 MiB). And kernel objects from one
    # system-wide table (fs.aio-max-nr): a job holding them all starves the host's aio.
    "vmsplice", "io_setup", "io_destroy", "io_getevents", "io_submit", "io_cancel", "io_pgetevents",
)  # fmt: skip
_SIGNALLING = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open")


class SeccompUnsupported(RuntimeError):
    """This CPU architecture has no syscall table here, so no filter can be built."""


def seccomp_arch() -> str:
    """The machine name (``x86_64``, ``aarch64``); raises :class:`SeccompUnsupported` for others."""
    machine = platform.machine()
    if machine not in _ARCHES:
        raise SeccompUnsupported(f"no seccomp syscall table for architecture {machine!r}")
    return machine


def syscall_nr(name: str) -> int:
    """This architecture's number for syscall ``name`` (the worker calls clone and pivot_root)."""
    return _ARCHES[seccomp_arch()][1][name]


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _prologue(audit_arch: int, machine: str) -> list[bytes]:
    prog = [_ins(_LD_W_ABS, _OFF_ARCH), _ins(_JEQ_K, audit_arch, 1, 0), _ins(_RET_K, _RET_KILL_PROCESS)]
    prog.append(_ins(_LD_W_ABS, _OFF_NR))
    if machine == "x86_64":
        # x32 syscalls share the arch value but set bit 30 of nr; they would bypass every number below.
        prog += [_ins(_JGE_K, 0x40000000, 0, 1), _ins(_RET_K, _RET_KILL_PROCESS)]
    return prog


def _on_syscall(nr: int, body: list[bytes]) -> list[bytes]:
    """``if nr == N: body`` where body always returns, so the accumulator still holds nr after it."""
    return [_ins(_JEQ_K, nr, 0, len(body)), *body]


@cache
def base_filter() -> bytes:
    """The per-sandbox program (see the module docstring), as packed ``struct sock_filter`` bytes."""
    machine = seccomp_arch()
    audit_arch, nrs = _ARCHES[machine]
    eperm = _ins(_RET_K, _RET_ERRNO | _EPERM)
    prog = _prologue(audit_arch, machine)
    prog += _on_syscall(nrs["socket"], [_ins(_RET_K, _RET_ERRNO | _EACCES)])
    # glibc falls back from clone3 to clone on ENOSYS; clone's flags can then be inspected.
    prog += _on_syscall(nrs["clone3"], [_ins(_RET_K, _RET_ERRNO | _ENOSYS)])
    prog += _on_syscall(
        nrs["clone"],
        [_ins(_LD_W_ABS, _arg_lo(0)), _ins(_JSET_K, _CLONE_NEW_MASK, 0, 1), eperm,
         _ins(_RET_K, _RET_ALLOW)],
    )  # fmt: skip
    # A job's death signal ties it to whoever started it (bwrap's --die-with-parent, a pool job's
    # init): a job that cleared it could outlive a caller that is killed.
    # Transparent huge pages are switched off for the job (PR_SET_THP_DISABLE before it runs, kept
    # across fork and exec): it may not switch them back on.
    prog += _on_syscall(
        nrs["prctl"],
        [_ins(_LD_W_ABS, _arg_lo(0)), _ins(_JEQ_K, _PR_SET_PDEATHSIG, 1, 0),
         _ins(_JEQ_K, _PR_SET_THP_DISABLE, 0, 1), eperm, _ins(_RET_K, _RET_ALLOW)],
    )  # fmt: skip
    # Huge pages from the hugetlb pool are memory no rlimit of the job's counts; asking for
    # transparent ones is a no-op (they are off), as on a host where THP is "never".
    prog += _on_syscall(
        nrs["mmap"],
        [_ins(_LD_W_ABS, _arg_lo(3)), _ins(_JSET_K, _MAP_HUGETLB, 0, 1), eperm,
         _ins(_RET_K, _RET_ALLOW)],
    )  # fmt: skip
    prog += _on_syscall(
        nrs["madvise"],
        [_ins(_LD_W_ABS, _arg_lo(2)), _ins(_JEQ_K, _MADV_HUGEPAGE, 1, 0),
         _ins(_JEQ_K, _MADV_COLLAPSE, 0, 1), _ins(_RET_K, _NOOP), _ins(_RET_K, _RET_ALLOW)],
    )  # fmt: skip
    # File locks: the kernel's lock table is one for the whole host, and a job can open host files
    # (the interpreter, /dev/null) that host processes and other jobs lock too, so a lock would
    # block them or carry bits between jobs (F_GETLK reads another's lock). seccomp cannot see
    # which file an fd is, so every lock call succeeds without taking a lock: single-process users
    # (sqlite3 in the work dir) work; processes of one job cannot exclude each other by locks.
    prog += _on_syscall(nrs["flock"], [_ins(_RET_K, _NOOP)])
    prog += _on_syscall(nrs["fcntl"], _fcntl_body(eperm))
    # Terminal injection, and the socket ioctls that list the host's interfaces and addresses.
    prog += _on_syscall(
        nrs["ioctl"],
        [_ins(_LD_W_ABS, _arg_lo(1)), _ins(_JEQ_K, _TIOCSTI, 4, 0), _ins(_JEQ_K, _TIOCLINUX, 3, 0),
         _ins(_JGE_K, _SIOC_FIRST, 0, 1), _ins(_JGE_K, _SIOC_END, 0, 1), _ins(_RET_K, _RET_ALLOW),
         eperm],
    )  # fmt: skip
    # sendto(fd, buf, len, flags, NULL, 0) is send(): allowed; with a destination address it is not.
    prog += _on_syscall(
        nrs["sendto"],
        [_ins(_LD_W_ABS, _arg_lo(4)), _ins(_JEQ_K, 0, 0, 3), _ins(_LD_W_ABS, _arg_lo(4) + 4),
         _ins(_JEQ_K, 0, 0, 1), _ins(_RET_K, _RET_ALLOW), eperm],
    )  # fmt: skip
    for name in _DENIED:
        if name in nrs:  # aarch64 has no inotify_init
            prog += _on_syscall(nrs[name], [eperm])
    prog.append(_ins(_RET_K, _RET_ALLOW))
    return b"".join(prog)


def _fcntl_body(eperm: bytes) -> list[bytes]:
    """``fcntl``: lock commands return 0 untouched, lease and notify commands EPERM, others run."""
    cmds = _LOCK_CMDS + _LEASE_CMDS
    body = [_ins(_LD_W_ABS, _arg_lo(1))]
    for i, cmd in enumerate(cmds):
        left = len(cmds) - 1 - i  # JEQs after this one
        if cmd in _LOCK_CMDS:
            body.append(_ins(_JEQ_K, cmd, left + 2, 0))  # -> the no-op return
        else:
            body.append(_ins(_JEQ_K, cmd, left + 1, 0))  # -> eperm
    body += [_ins(_RET_K, _RET_ALLOW), eperm, _ins(_RET_K, _NOOP)]
    return body


@dataclass(frozen=True, kw_only=True)
class GuardTemplate:
    """A guard program whose pid constants the worker fills in before installing it."""

    program: bytes
    """Packed ``struct sock_filter`` bytes with zero where the pid goes."""
    pid_offsets: tuple[int, ...]
    """Byte offsets of the 32-bit ``k`` fields that must hold the worker's pid."""
    neg_pid_offsets: tuple[int, ...]
    """Byte offsets of the ``k`` fields that must hold minus the pid (its process group)."""


@cache
def guard_filter() -> GuardTemplate:
    """Refuse ``kill(pid)``, ``kill(-pid)``, ``kill(-1)``, thread kills and pidfds aimed at the worker."""
    machine = seccomp_arch()
    audit_arch, nrs = _ARCHES[machine]
    prog = _prologue(audit_arch, machine)
    pid_at: list[int] = []
    neg_at: list[int] = []
    for name in _SIGNALLING:
        start = len(prog)
        body = [
            _ins(_LD_W_ABS, _arg_lo(0)),
            _ins(_JEQ_K, 0, 3, 0),  # == pid
            _ins(_JEQ_K, 0, 2, 0),  # == -pid: the worker's process group
            _ins(_JEQ_K, 0xFFFFFFFF, 1, 0),  # == -1: every process we may signal
            _ins(_RET_K, _RET_ALLOW),
            _ins(_RET_K, _RET_ERRNO | _EPERM),
        ]
        prog += _on_syscall(nrs[name], body)
        # +1 for the JEQ on nr, +1 past the load; 4 bytes into an instruction is its k field.
        pid_at.append((start + 2) * 8 + 4)
        neg_at.append((start + 3) * 8 + 4)
    prog.append(_ins(_RET_K, _RET_ALLOW))
    return GuardTemplate(program=b"".join(prog), pid_offsets=tuple(pid_at), neg_pid_offsets=tuple(neg_at))
