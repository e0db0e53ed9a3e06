"""How the host starts a sandbox: the uid switch, and the kernel calls the sandbox makes on itself."""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys
import textwrap

import pytest

from retryctl.sandbox import _launch
from retryctl.sandbox._inside_os import PR_SET_DUMPABLE, landlock_abi, prctl
from retryctl.sandbox._launch import allocate_uid, release_uid, uid_switch

_STATUS = ["/usr/bin/python3", "-I", "-S", "-c", "print(open('/proc/self/status').read())"]


def _status_of(uid: int) -> dict[str, str]:
    """The /proc status fields of a process started the way the sandbox starts one under ``uid``."""
    prefix, ids = uid_switch(uid)
    done = subprocess.run(
        prefix + _STATUS, capture_output=True, text=True, timeout=30, check=True, **ids
    )  # fmt: skip
    return {k: v.strip() for k, _, v in (line.partition(":") for line in done.stdout.splitlines())}


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root switches uid (else none is needed)")


class TestUidSwitch:
    def test_no_uid_means_no_switch(self):
        assert uid_switch(None) == ([], {})

    @needs_root
    def test_the_process_has_the_uid_no_groups_and_no_capabilities(self):
        uid = allocate_uid()
        try:
            prefix, ids = uid_switch(uid)
            assert prefix, "setpriv is part of util-linux; this machine should have it"
            assert ids == {}, "with setpriv Popen must not switch ids itself (that forces a fork)"
            status = _status_of(uid)
        finally:
            release_uid(uid)
        assert status["Uid"].split() == [str(uid)] * 4, status["Uid"]
        assert status["Gid"].split() == [str(uid)] * 4, status["Gid"]
        assert status["Groups"] == ""
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0

    @needs_root
    def test_without_setpriv_popen_switches_the_same_ids(self, monkeypatch: pytest.MonkeyPatch):
        monkeypatch.setattr(_launch, "_setpriv", lambda: None)
        uid = allocate_uid()
        try:
            assert uid_switch(uid) == ([], {"user": uid, "group": uid, "extra_groups": []})
            status = _status_of(uid)
        finally:
            release_uid(uid)
        assert status["Uid"].split() == [str(uid)] * 4
        assert status["Gid"].split() == [str(uid)] * 4 and status["Groups"] == ""
        assert int(status["CapEff"], 16) == 0


class TestInsideOs:
    def test_landlock_abi_matches_the_kernel(self):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        expected = max(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)), 0)
        found = landlock_abi()
        assert type(found) is int and found == expected

    def test_a_refused_call_raises_with_its_errno(self):
        with pytest.raises(OSError) as caught:
            prctl(PR_SET_DUMPABLE, 7)  # only 0 and 1 are valid
        assert caught.value.errno == errno.EINVAL

    @pytest.mark.skipif(landlock_abi() == 0, reason="Landlock is not enabled in this kernel")
    def test_landlock_confines_a_child_interpreter(self, tmp_path):
        allowed = tmp_path / "allowed"
        allowed.mkdir()
        (tmp_path / "secret.txt").write_text("no")
        code = textwrap.dedent(f"""
            from retryctl.sandbox._inside_os import (PR_SET_NO_NEW_PRIVS, landlock_abi,
                                                     landlock_restrict, prctl)
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            landlock_restrict(landlock_abi(), read_paths=["/usr"], write_paths=[{str(allowed)!r}],
                              device_paths=[])
            open({str(allowed / "out.txt")!r}, "w").write("yes")
            print(open("/usr/lib/os-release").read() != "")
            try:
                open({str(tmp_path / "secret.txt")!r}).read()
                print("READ")
            except PermissionError:
                print("DENIED")
        """)
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["True", "DENIED"]
        assert (allowed / "out.txt").read_text() == "yes"
