"""Kernel calls the sandbox makes on itself: Landlock, seccomp, prctl (ctypes, stdlib only).

This module runs *inside* the sandbox under ``/usr/bin/python3 -I -S`` (it is sent as source text,
followed by ``_inside_job.py`` and ``_inside_worker.py``), and on the host only to probe the
Landlock ABI. It must import nothing outside the standard library and must not use
``from __future__`` (its text is concatenated).
"""

import ctypes
import os

__all__ = [
    "landlock_abi",
    "landlock_restrict",
    "prctl",
    "seccomp_install",
]

_NR_LANDLOCK_CREATE_RULESET = 444  # same number on every architecture (added after the unification)
_NR_LANDLOCK_ADD_RULE = 445
_NR_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_MODE_FILTER = 2

# Landlock filesystem rights by the ABI that introduced them.
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1, 2, 4, 8
_FS_V1_ALL = (1 << 13) - 1
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def prctl(option: int, arg: int = 0) -> None:
    """``prctl(option, arg, 0, 0, 0)``, raising ``OSError`` on failure."""
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl({option})")


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is missing or disabled."""
    version = _libc.syscall(_NR_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def _handled_fs(abi: int) -> int:
    rights = _FS_V1_ALL
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


def landlock_restrict(
    abi: int, *, read_paths: list[str], write_paths: list[str], device_paths: list[str]
) -> None:
    """Confine this process and its future children: read/execute ``read_paths``, everything inside
    ``write_paths``, read and write ``device_paths``; nothing else on the filesystem, no TCP bind or
    connect (ABI 4+), no signals or abstract unix sockets beyond this domain (ABI 6+).

    Needs ``no_new_privs`` first. Paths that do not exist are skipped.
    """
    handled = _handled_fs(abi)
    attr = _RulesetAttr(handled, _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0, 0)
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    ruleset = _check(
        _libc.syscall(_NR_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                      ctypes.c_uint32(0)),
        "landlock_create_ruleset",
    )  # fmt: skip
    try:
        grants = [(p, FS_EXECUTE | FS_READ_FILE | FS_READ_DIR) for p in read_paths]
        grants += [(p, handled) for p in write_paths]
        grants += [(p, FS_READ_FILE | FS_WRITE_FILE | (_FS_IOCTL_DEV & handled)) for p in device_paths]
        for path, access in grants:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                allowed = access if os.path.isdir(path) else access & _FILE_ONLY
                rule = _PathBeneathAttr(allowed & handled, fd)
                _check(
                    _libc.syscall(_NR_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset),
                                  ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(rule),
                                  ctypes.c_uint32(0)),
                    f"landlock_add_rule({path})",
                )  # fmt: skip
            finally:
                os.close(fd)
        _check(
            _libc.syscall(_NR_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)


def seccomp_install(program: bytes) -> None:
    """Install a packed classic-BPF program as a seccomp filter (needs ``no_new_privs`` first)."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(
        _libc.prctl(PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )
