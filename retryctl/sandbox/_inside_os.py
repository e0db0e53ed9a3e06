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
    "drop_capabilities",
    "landlock_abi",
    "landlock_restrict",
    "landlock_scope",
    "minimal_root",
    "mount_tmpfs",
    "own_user_namespace",
    "prctl",
    "private_mounts",
    "read_only_devices",
    "seccomp_install",
    "set_hostname",
    "spawn_in_pid_namespace",
    "unmount",
    "unshare",
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
PR_SET_THP_DISABLE = 41
_SECCOMP_MODE_FILTER = 2

# Landlock filesystem rights by the ABI that introduced them.
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1, 2, 4, 8
_FS_V1_ALL = (1 << 13) - 1
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 0x4000, 1 << 18
_MNT_DETACH = 2
_MS_RDONLY, _MS_REMOUNT, _MS_BIND = 1, 32, 4096
_SIGCHLD = 17  # the same number on x86_64 and aarch64
_CAP_V3 = 0x20080522


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
_unshare = _libc.function("unshare", _Int, [_Int])
_mount = _libc.function("mount", _Int, [_CharP, _CharP, _CharP, _ULong, _CharP])
_sethostname = _libc.function("sethostname", _Int, [_CharP, _ULong])
_umount2 = _libc.function("umount2", _Int, [_CharP, _Int])
_capset = _libc.function("capset", _Int)


class _RulesetAttr(_ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", _ULongLong),
        ("handled_access_net", _ULongLong),
        ("scoped", _ULongLong),
    )


class _PathBeneathAttr(_ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", _ULongLong), ("parent_fd", _Int))


class _CapHeader(_ctypes.Structure):
    _fields_ = (("version", _UInt), ("pid", _Int))


class _CapData(_ctypes.Structure):
    # Two 32-bit halves of each set (effective, permitted, inheritable), all zero.
    _fields_ = tuple((f"w{i}", _UInt) for i in range(6))


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


def unshare(flags: int) -> None:
    """``unshare(flags)``, raising ``OSError`` on failure."""
    _check(_unshare(flags), f"unshare({flags:#x})")


def _write_proc(path: str, text: str) -> None:
    fd = posix.open(path, posix.O_WRONLY | posix.O_CLOEXEC)
    try:
        posix.write(fd, text.encode())
    finally:
        posix.close(fd)


def own_user_namespace(extra_flags: int = 0) -> None:
    """Enter a new user namespace (plus ``extra_flags`` namespaces) mapping only this process's own
    uid and gid to themselves: it then holds every capability over the namespaces it creates next
    (mounts, IPC, hostname, pids) and none over anything of the host's."""
    uid, gid = posix.geteuid(), posix.getegid()
    unshare(CLONE_NEWUSER | extra_flags)
    _write_proc("/proc/self/uid_map", f"{uid} {uid} 1")
    _write_proc("/proc/self/setgroups", "deny")
    _write_proc("/proc/self/gid_map", f"{gid} {gid} 1")


def private_mounts() -> None:
    """Stop mount events of this (new) mount namespace from propagating anywhere."""
    _check(_mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount(/, private)")


def read_only_devices(paths: list[str]) -> None:
    """Make the bind mounts of the device nodes at ``paths`` read-only (not ``nodev``): the devices
    still read and write, but their inodes are the host's, and on a writable mount anyone who may
    write a device may also set its times (``utime(path, None)``), which the host would see."""
    flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID
    for path in paths:
        _check(_mount(None, path.encode(), None, flags, None), f"read-only {path}")


def mount_tmpfs(path: str, size: int, inodes: int) -> None:
    """Mount a tmpfs of ``size`` bytes and at most ``inodes`` inodes over ``path`` (in a mount
    namespace of our own): the kernel enforces both, whatever the job does to its tree."""
    # huge=never: a 4 KiB splice of a file page into a pipe must not pin a 2 MiB one.
    options = f"size={size},nr_inodes={inodes},mode=700,huge=never".encode()
    _check(
        _mount(b"tmpfs", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options),
        f"mount(tmpfs on {path})",
    )


def _bind(source: str, target: str, *, read_only: bool) -> None:
    _check(_mount(source.encode(), target.encode(), None, _MS_BIND | _MS_REC, None), f"bind {source}")
    if read_only:
        flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
        _check(_mount(None, target.encode(), None, flags, None), f"read-only {target}")


def _make_parents(path: str) -> None:
    parts = path.strip("/").split("/")
    current = ""
    for part in parts[:-1]:
        current += "/" + part
        try:  # noqa: SIM105 - no contextlib import in the sandbox's start-up
            posix.mkdir(current, 0o755)
        except FileExistsError:
            pass


def minimal_root(
    scratch: str, *, read_paths: list[str], device_paths: list[str], keep: str, pivot_nr: int
) -> None:
    """Replace this mount namespace's root with a tmpfs at ``scratch`` holding only ``read_paths``
    (bound read-only; merged-/usr symlinks stay symlinks), ``device_paths`` and ``keep`` (bound
    read-write, not recursively: ``scratch`` lives inside it), as bubblewrap builds its root: no
    other host path can be stat()ed, watched or connected to afterwards."""
    _check(_mount(b"tmpfs", scratch.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=1m,mode=755"),
           "mount(scratch root)")  # fmt: skip
    for path in read_paths:
        target = scratch + path
        try:
            mode = posix.lstat(path).st_mode & 0o170000
        except FileNotFoundError:
            continue
        _make_parents(target)
        if mode == 0o120000:  # a symlink such as /lib -> usr/lib
            posix.symlink(posix.readlink(path), target)
            continue
        if mode == 0o040000:
            posix.mkdir(target, 0o755)
        else:
            posix.close(posix.open(target, posix.O_WRONLY | posix.O_CREAT, 0o644))
        _bind(path, target, read_only=True)
    for path in device_paths:
        _make_parents(scratch + path)
        posix.close(posix.open(scratch + path, posix.O_WRONLY | posix.O_CREAT, 0o644))
        _bind(path, scratch + path, read_only=False)
    _make_parents(scratch + keep)
    posix.mkdir(scratch + keep, 0o700)
    _check(_mount(keep.encode(), (scratch + keep).encode(), None, _MS_BIND, None), f"bind {keep}")
    posix.mkdir(scratch + "/.old", 0o700)
    _check(_syscall(_Long(pivot_nr), scratch.encode(), (scratch + "/.old").encode()), "pivot_root")
    posix.chdir("/")
    _check(_umount2(b"/.old", _MNT_DETACH), "umount(old root)")
    posix.rmdir("/.old")
    flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
    _check(_mount(None, b"/", None, flags, None), "read-only root")


def unmount(path: str) -> None:
    """Detach the mount at ``path``; its tmpfs is freed once nothing holds it open."""
    _check(_umount2(path.encode(), _MNT_DETACH), f"umount({path})")


def spawn_in_pid_namespace(clone_nr: int) -> int:
    """``clone(CLONE_NEWPID | SIGCHLD)``: fork a child that is pid 1 of a new pid namespace; 0 in
    the child, its pid in the parent. (``unshare(CLONE_NEWPID)`` works once per process; clone's flag
    every time.) The child returns into this interpreter as after a fork but without Python's and
    glibc's fork hooks: fine for a single-threaded caller whose child only sets up and forks again
    (glibc's own fork then makes a fully consistent grandchild)."""
    return _check(
        _syscall(_Long(clone_nr), _ULong(CLONE_NEWPID | _SIGCHLD), _ULong(0), _ULong(0), _ULong(0),
                 _ULong(0)),
        "clone(CLONE_NEWPID)",
    )  # fmt: skip


def set_hostname(name: str) -> None:
    """``sethostname`` (in a UTS namespace of our own: the host's name is not visible)."""
    data = name.encode()
    _check(_sethostname(data, _ULong(len(data))), "sethostname")


def drop_capabilities() -> None:
    """Clear every capability set of this thread (those a new user namespace granted)."""
    header, data = _CapHeader(_CAP_V3, 0), _CapData()
    _check(_capset(_ctypes.byref(header), _ctypes.byref(data)), "capset")


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


def landlock_scope(abi: int) -> None:
    """A domain that handles no filesystem or network right, only the signal and abstract-unix
    scopes (ABI 6+): it confines whom this process and its children may signal without stopping
    them from mounting in namespaces of their own (a domain handling filesystem rights would)."""
    attr = _RulesetAttr(0, 0, _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
    ruleset = _check(
        _syscall(_NR_LANDLOCK_CREATE_RULESET, _ctypes.byref(attr), _ULong(24), _UInt(0)),
        "landlock_create_ruleset(scope)",
    )  # fmt: skip
    try:
        _check(_syscall(_NR_LANDLOCK_RESTRICT_SELF, _Int(ruleset), _UInt(0)), "landlock_restrict_self")
    finally:
        posix.close(ruleset)


def seccomp_install(program: bytes) -> None:
    """Install a packed classic-BPF program as a seccomp filter (needs ``no_new_privs`` first)."""
    fprog = _SockFprog(len(program) // 8, program)
    _check(
        _prctl(PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _ctypes.addressof(fprog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )
