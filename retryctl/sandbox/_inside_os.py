"""Kernel calls the sandbox makes on itself: Landlock, seccomp, prctl (``_ctypes``, stdlib only).

This module runs *inside* the sandbox under ``/usr/bin/python3 -I -S`` (it is sent as source text,
followed by ``_inside_job.py`` and ``_inside_worker.py``), and on the host only to probe the
Landlock ABI. It must import nothing outside the standard library and must not use
``from __future__`` (its text is concatenated).

It uses the C half of ctypes, ``_ctypes``, directly: importing the ``ctypes`` package costs ~3.4 ms
at every worker start (its Python half builds dozens of types this module never uses), ``_ctypes``
~0.6 ms. The few C types needed are declared here the way the ``ctypes`` package declares them.
"""

import _ctypes
import posix

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


# The C types used below (LP64 Linux: long and size_t are 64-bit, as ctypes' c_long and c_size_t).
class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "i"


class _UInt(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "I"


class _Long(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "l"


class _ULong(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "L"


class _UShort(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "H"


class _ULongLong(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "Q"


class _CharP(_ctypes._SimpleCData):  # type: ignore[type-arg]
    # ctypes' c_char_p: points at a bytes object's own buffer (NULs and all) and keeps it alive.
    _type_ = "z"


class _LibcFunc(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO


class _Libc:
    """The C library as ``CDLL(None, use_errno=True)`` opens it: function lookups read ``_handle``."""

    def __init__(self) -> None:
        self._handle = _ctypes.dlopen(None, 0)  # type: ignore[arg-type]

    def function(self, name: str, restype: type, argtypes: list[type] | None = None) -> _LibcFunc:
        """The C function ``name``, returning ``restype`` (an int result), with ``argtypes`` if given."""
        func = _LibcFunc((name, self))  # type: ignore[arg-type]
        func.restype = restype
        if argtypes is not None:
            func.argtypes = argtypes
        return func


_libc = _Libc()
_syscall = _libc.function("syscall", _Long)
_prctl = _libc.function("prctl", _Int, [_Int, _ULong, _ULong, _ULong, _ULong])


class _RulesetAttr(_ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", _ULongLong),
        ("handled_access_net", _ULongLong),
        ("scoped", _ULongLong),
    )


class _PathBeneathAttr(_ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", _ULongLong), ("parent_fd", _Int))


class _SockFprog(_ctypes.Structure):
    _fields_ = (("len", _UShort), ("filter", _CharP))


def _check(result: int, what: str) -> int:
    if result < 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"{what}: {posix.strerror(err)}")
    return result


def prctl(option: int, arg: int = 0) -> None:
    """``prctl(option, arg, 0, 0, 0)``, raising ``OSError`` on failure."""
    _check(_prctl(option, arg, 0, 0, 0), f"prctl({option})")


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is missing or disabled."""
    version = _syscall(_NR_LANDLOCK_CREATE_RULESET, None, _ULong(0), _UInt(_LANDLOCK_CREATE_RULESET_VERSION))
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
        _syscall(_NR_LANDLOCK_CREATE_RULESET, _ctypes.byref(attr), _ULong(size), _UInt(0)),
        "landlock_create_ruleset",
    )  # fmt: skip
    try:
        grants = [(p, FS_EXECUTE | FS_READ_FILE | FS_READ_DIR) for p in read_paths]
        grants += [(p, handled) for p in write_paths]
        grants += [(p, FS_READ_FILE | FS_WRITE_FILE | (_FS_IOCTL_DEV & handled)) for p in device_paths]
        for path, access in grants:
            try:
                fd = posix.open(path, posix.O_PATH | posix.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                is_dir = posix.fstat(fd).st_mode & 0o170000 == 0o040000  # S_ISDIR; no `stat` import
                allowed = access if is_dir else access & _FILE_ONLY
                rule = _PathBeneathAttr(allowed & handled, fd)
                _check(
                    _syscall(_NR_LANDLOCK_ADD_RULE, _Int(ruleset), _Int(_LANDLOCK_RULE_PATH_BENEATH),
                             _ctypes.byref(rule), _UInt(0)),
                    f"landlock_add_rule({path})",
                )  # fmt: skip
            finally:
                posix.close(fd)
        _check(
            _syscall(_NR_LANDLOCK_RESTRICT_SELF, _Int(ruleset), _UInt(0)),
            "landlock_restrict_self",
        )
    finally:
        posix.close(ruleset)


def seccomp_install(program: bytes) -> None:
    """Install a packed classic-BPF program as a seccomp filter (needs ``no_new_privs`` first)."""
    fprog = _SockFprog(len(program) // 8, program)
    _check(
        _prctl(PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _ctypes.addressof(fprog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )
