"""The embedded build check: a child process that loads and decodes, its death turned into one line."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from retryctl.models import check_embedded_build
from retryctl.models._build_check import REBUILD_HINT, _probe, build_key, native_libraries, probe_child
from tests.models.conftest import needs_llama


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


class TestProbeChild:
    def test_a_clean_exit_is_no_problem(self) -> None:
        assert probe_child(_python("pass"), timeout_s=30) is None

    def test_death_by_sigill_is_named_with_the_portable_rebuild(self) -> None:
        # A real death by signal, as a llama.cpp built with AMX dies on a VM that cannot execute it.
        problem = probe_child(_python("import os, signal; os.kill(os.getpid(), signal.SIGILL)"), timeout_s=30)
        assert problem is not None
        assert "SIGILL (illegal instruction)" in problem
        assert REBUILD_HINT in problem and "-DGGML_NATIVE=OFF" in problem
        assert "\n" not in problem

    def test_other_signals_are_named(self) -> None:
        problem = probe_child(
            _python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"), timeout_s=30
        )
        assert problem is not None and "SIGSEGV (segmentation fault)" in problem

    def test_a_failed_exit_quotes_the_last_line_of_stderr(self) -> None:
        code = (
            "import sys; print('loading', file=sys.stderr); "
            "print('ValueError: no model', file=sys.stderr); sys.exit(1)"
        )
        problem = probe_child(_python(code), timeout_s=30)
        assert problem == "the embedded model does not run: ValueError: no model"

    def test_a_hang_is_cut_at_the_timeout(self) -> None:
        problem = probe_child(_python("import time; time.sleep(60)"), timeout_s=0.5)
        assert problem is not None and "within 0.5 s" in problem

    def test_a_missing_program_is_a_problem_not_an_exception(self, tmp_path: Path) -> None:
        problem = probe_child([str(tmp_path / "no-such-python")], timeout_s=5)
        assert problem is not None and "could not start the model check" in problem


class TestWhatIsRemembered:
    @pytest.mark.parametrize(
        ("code", "remembered"),
        [
            ("pass", True),  # it ran
            ("import os, signal; os.kill(os.getpid(), signal.SIGILL)", True),  # the build's fault
            ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", True),  # AMX's ldtilecfg here
            ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", False),  # the OOM killer, say
            ("import sys; sys.exit(1)", False),  # a missing file, a bad install: checked again
            ("import time; time.sleep(60)", False),  # a slow, loaded machine
        ],
    )
    def test_only_outcomes_about_the_build_are_kept(self, code: str, remembered: bool) -> None:
        assert _probe(_python(code), 0.5 if "sleep" in code else 30).of_the_build is remembered


@needs_llama
class TestCheckEmbeddedBuild:
    def test_the_installed_build_runs_here_and_the_answer_is_cached(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # This project's machines report AMX that their VM cannot run: a native build fails this test.
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        first = check_embedded_build()
        assert first.ok, first.problem
        assert not first.cached and first.key == build_key()
        cache = json.loads((tmp_path / "retryctl" / "embedded-build.json").read_text())
        assert cache == {first.key: {"ok": True, "problem": None}}
        second = check_embedded_build()
        assert second.ok and second.cached
        assert not check_embedded_build(refresh=True).cached

    def test_a_cached_failure_is_reported_without_running_the_child(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        key = build_key()
        assert key is not None
        cache = tmp_path / "retryctl" / "embedded-build.json"
        cache.parent.mkdir(parents=True)
        cache.write_text(json.dumps({key: {"ok": False, "problem": "crashed with SIGILL"}}))
        check = check_embedded_build()
        assert not check.ok and check.cached and check.problem == "crashed with SIGILL"

    def test_a_damaged_cache_is_checked_again_and_rewritten(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        cache = tmp_path / "retryctl" / "embedded-build.json"
        cache.parent.mkdir(parents=True)
        cache.write_text("{not json")
        check = check_embedded_build()
        assert check.ok and not check.cached
        assert json.loads(cache.read_text())[str(check.key)]["ok"] is True

    def test_an_unwritable_cache_does_not_stop_the_check(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        blocker = tmp_path / "file"
        blocker.write_text("a file where the cache folder would go")
        monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
        check = check_embedded_build()
        assert check.ok and not check.cached


# Registers and mnemonics of what x86-64-v3 leaves out: AVX-512 (zmm, opmask) and AMX (tiles).
_BEYOND_V3 = re.compile(r"%zmm\d|%k[1-7]\b|\b(?:ldtilecfg|tilezero|tileloadd|tdpb\w+)\b")


@needs_llama
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the portable instruction set is x86-64-v3")
class TestPortableBuild:
    def test_the_installed_cpu_backend_uses_nothing_beyond_x86_64_v3(self) -> None:
        """What `make demo` installs was compiled for fixed flags, not for this host's CPUID (which
        reports AVX-512 and AMX here): not one AVX-512 or AMX instruction in the CPU backend."""
        objdump = shutil.which("objdump")
        if objdump is None:
            if os.environ.get("CI"):
                pytest.fail("CI has binutils (gcc's): objdump is missing")
            pytest.skip("objdump (binutils) is not installed")
        cpu = [p for p in native_libraries() if p.name.startswith("libggml-cpu.so")]
        assert cpu, native_libraries()
        listing = subprocess.run(
            [objdump, "-d", "--no-show-raw-insn", str(cpu[0])],
            capture_output=True, text=True, check=True, timeout=120,
        ).stdout  # fmt: skip
        assert "%ymm" in listing  # AVX2 is there: the disassembly is real and the flags took effect
        beyond = _BEYOND_V3.findall(listing)
        assert not beyond, f"{cpu[0]} uses {sorted(set(beyond))[:10]}: rebuild with {REBUILD_HINT}"
