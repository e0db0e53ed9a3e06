"""run_code and Sandbox as a user sees them: results, files, limits, errors, restarts, tiers."""

from __future__ import annotations

import asyncio
import os
import threading

import pydantic
import pytest

from retryctl.exceptions import ConfigError, RuntimeFailure
from retryctl.sandbox import (
    ExecResult,
    ProbeReport,
    Sandbox,
    SandboxLimits,
    SandboxUnavailable,
    Tier,
    TierStatus,
    detect_tier,
    probe_tiers,
    run_code,
)
from tests.sandbox.conftest import TEST_LIMITS, Runner, require_tier


class TestRunCode:
    def test_prints_and_exit_codes(self, run: Runner, tier: Tier):
        ok = run("print(1 + 1)")
        assert (ok.stdout, ok.stderr, ok.exit_code, ok.timed_out) == ("2\n", "", 0, False)
        assert ok.isolation is tier and ok.ok and ok.duration_ms > 0
        assert run("import sys; sys.exit(3)").exit_code == 3
        assert run("raise SystemExit('bad input')").exit_code == 1

    def test_exception_comes_back_with_the_offending_line(self, run: Runner):
        res = run("x = 1\ny = x / 0\n")
        assert res.exit_code == 1 and not res.ok
        assert "ZeroDivisionError" in res.stderr
        assert "y = x / 0" in res.stderr, "the traceback must quote the job's own line"
        assert "exec_user_code" not in res.stderr, "the runner's frame is noise"

    def test_files_are_in_the_work_dir(self, run: Runner):
        res = run(
            "import os\n"
            "print(open('data/in.txt').read(), open('raw.bin','rb').read(),"
            " os.getcwd() == os.environ['HOME'])",
            files={"data/in.txt": "héllo", "raw.bin": b"\x00\x01"},
        )
        assert res.stdout == "héllo b'\\x00\\x01' True\n", res

    def test_stdin_is_empty_and_unicode_survives(self, run: Runner):
        res = run("import sys\nprint(repr(sys.stdin.read()), '✓')")
        assert res.stdout == "'' ✓\n"

    def test_subprocesses_of_the_system_python_work(self, run: Runner):
        res = run(
            "import subprocess\n"
            "print(subprocess.run(['/usr/bin/python3', '-c', 'print(6*7)'],"
            " capture_output=True, text=True).stdout)"
        )
        assert res.stdout.strip() == "42", res

    @pytest.mark.parametrize(
        "files",
        [{"/etc/x": "a"}, {"../x": "a"}, {"": "a"}, {"a/../../x": "a"}, {"ok.txt": 3}],
        ids=["absolute", "parent", "empty", "escaping", "not-bytes"],
    )
    def test_bad_files_name_the_field(self, files):
        with pytest.raises(ConfigError) as err:
            run_code("print(1)", files=files)
        assert err.value.field.startswith("files")

    def test_bad_limits_name_the_field(self):
        with pytest.raises(pydantic.ValidationError, match="timeout_s"):
            run_code("print(1)", timeout_s=-1)
        with pytest.raises(pydantic.ValidationError, match="memory_mb"):
            run_code("print(1)", memory_mb=1)
        with pytest.raises(ConfigError, match="code"):
            run_code(b"print(1)")  # type: ignore[arg-type]

    def test_unknown_and_unsafe_tiers_are_refused(self):
        with pytest.raises(ConfigError) as err:
            run_code("print(1)", tier="docker")
        assert err.value.field == "tier"
        with pytest.raises(ConfigError, match="unsafe=True"):
            run_code("print(1)", tier="unsafe")

    def test_unsafe_tier_runs_only_when_asked(self):
        res = run_code("print(5)", tier="unsafe", unsafe=True)
        assert res.stdout == "5\n" and res.isolation is Tier.UNSAFE


class TestInsideProgram:
    def test_cold_bubblewrap_job_path_loads_neither_os_nor_the_ctypes_package(self):
        # Each costs milliseconds of a 15 ms budget (see _inside_job); the job may import them itself.
        # Only ctypes' C half is loaded: the job's namespaces, tmpfs and seccomp need kernel calls.
        require_tier(Tier.BUBBLEWRAP)
        res = run_code("import sys; print(sorted({'os', 'ctypes', '_ctypes', 'struct'} & set(sys.modules)))",
                       tier=Tier.BUBBLEWRAP)  # fmt: skip
        assert res.stdout == "['_ctypes']\n", res

    def test_the_job_environment_is_the_same_in_every_tier_and_entry_point(self, run: Runner):
        from retryctl.sandbox._inside_job import JOB_ENV

        res = run("import json, os; print(json.dumps(dict(os.environ)))\nprint(os.getcwd())")
        env_line, cwd = res.stdout.splitlines()
        import json

        env = json.loads(env_line)
        env.pop("PWD", None)  # bwrap's --chdir sets it; harmless
        assert env == dict(JOB_ENV, HOME=cwd, TMPDIR=cwd)

    def test_tracebacks_name_the_code_as_python_c_does(self, run: Runner):
        res = run("x = 1\nraise ValueError(x)\n")
        assert 'File "<string>", line 2, in <module>' in res.stderr and "raise ValueError(x)" in res.stderr

    def test_source_fallback_when_the_bytecode_differs(self, tier: Tier, monkeypatch: pytest.MonkeyPatch):
        from retryctl.sandbox import _launch

        monkeypatch.setattr(_launch, "_same_bytecode", lambda: False)
        _launch.inside_program.cache_clear()
        try:
            assert _launch.inside_program("direct")[1] == b""
            assert run_code("print(7)", tier=tier).stdout == "7\n"
            with Sandbox(tier=tier, limits=TEST_LIMITS) as sandbox:
                assert sandbox.run("print(8)").stdout == "8\n"
        finally:
            _launch.inside_program.cache_clear()


class TestProbe:
    def test_probe_reports_every_tier_with_a_reason(self):
        report = probe_tiers()
        assert [s.tier for s in report.tiers] == [Tier.BUBBLEWRAP, Tier.LANDLOCK, Tier.UNSAFE]
        assert all(s.reason for s in report.tiers)
        assert report.status(Tier.UNSAFE).available
        assert detect_tier() is not Tier.UNSAFE or not any(
            s.available for s in report.tiers if s.tier is not Tier.UNSAFE
        )

    def test_best_needs_unsafe_when_nothing_isolates(self):
        report = ProbeReport(
            tiers=(
                TierStatus(tier=Tier.BUBBLEWRAP, available=False, reason="bwrap not installed"),
                TierStatus(tier=Tier.LANDLOCK, available=False, reason="Landlock is not enabled"),
                TierStatus(tier=Tier.UNSAFE, available=True, reason="rlimits only"),
            ),
            landlock_abi=0,
        )
        with pytest.raises(SandboxUnavailable) as err:
            report.best()
        assert isinstance(err.value, RuntimeFailure)
        assert "bwrap not installed" in str(err.value) and "unsafe=True" in str(err.value)
        assert report.best(unsafe=True) is Tier.UNSAFE

    def test_missing_bwrap_is_reported_with_the_fix(self, monkeypatch: pytest.MonkeyPatch):
        from retryctl.sandbox import _probe

        monkeypatch.setattr("retryctl.sandbox._probe.shutil.which", lambda name: None)
        status = _probe._probe_bwrap()
        assert not status.available and "apt-get install bubblewrap" in status.reason

    def test_landlock_needs_abi_6_unless_root(self, monkeypatch: pytest.MonkeyPatch):
        from retryctl.sandbox import _probe

        monkeypatch.setattr(_probe, "running_as_root", lambda: False)
        assert not _probe._probe_landlock(5).available
        assert _probe._probe_landlock(6).available
        assert not _probe._probe_landlock(0).available
        monkeypatch.setattr(_probe, "running_as_root", lambda: True)
        assert _probe._probe_landlock(3).available

    def test_summary_has_a_line_per_tier(self):
        lines = probe_tiers().summary()
        assert [line.split(":")[0] for line in lines] == ["bubblewrap", "landlock", "unsafe"]

    def test_best_prefers_the_strongest(self):
        report = ProbeReport(
            tiers=(
                TierStatus(tier=Tier.BUBBLEWRAP, available=False, reason="no userns"),
                TierStatus(tier=Tier.LANDLOCK, available=True, reason="ABI 6"),
                TierStatus(tier=Tier.UNSAFE, available=True, reason="rlimits only"),
            ),
            landlock_abi=6,
        )
        assert report.best() is Tier.LANDLOCK


class TestSandboxLimits:
    def test_defaults_match_the_contract(self):
        limits = SandboxLimits()
        assert (limits.timeout_s, limits.memory_mb) == (10.0, 512)

    @pytest.mark.parametrize("field", ["timeout_s", "memory_mb", "disk_mb", "nproc", "nofile"])
    def test_bad_value_names_its_field(self, field):
        with pytest.raises(pydantic.ValidationError, match=field):
            SandboxLimits(**{field: 0})

    def test_wire_never_lets_the_output_cap_exceed_the_file_limit(self):
        wire = SandboxLimits(max_file_mb=1, max_output_bytes=4 << 20).as_wire()
        assert wire["max_file_bytes"] >= 4 << 20


class TestExecResult:
    @staticmethod
    def result(exit_code: int, timed_out: bool, *, stderr_truncated: bool = False) -> ExecResult:
        return ExecResult(
            stdout="", stderr="", exit_code=exit_code, timed_out=timed_out, duration_ms=1.0,
            isolation=Tier.LANDLOCK, stderr_truncated=stderr_truncated,
        )  # fmt: skip

    def test_ok_and_truncated(self):
        assert self.result(0, False).ok
        assert not self.result(-9, True).ok and not self.result(2, False).ok
        assert self.result(0, False, stderr_truncated=True).truncated
        assert not self.result(0, False).truncated


class TestSandbox:
    def test_jobs_do_not_see_each_others_files(self, tier: Tier):
        with Sandbox(tier=tier, limits=TEST_LIMITS) as sandbox:
            first = sandbox.run("import os\nopen('mine.txt','w').write('x')\nprint(os.getcwd())")
            second = sandbox.run(
                "import os\nprint(os.listdir('.'))\n"
                f"print(os.path.exists({first.stdout.strip() + '/mine.txt'!r}))"
            )
        assert second.stdout == "[]\nFalse\n", second

    def test_restart_after_n_jobs_and_after_a_timeout(self, tier: Tier):
        with Sandbox(tier=tier, limits=TEST_LIMITS, max_jobs_per_worker=2) as sandbox:
            outputs = [sandbox.run(f"print({i})").stdout for i in range(3)]
            assert outputs == ["0\n", "1\n", "2\n"]
            assert sandbox.restarts == 1
            assert sandbox.run("while True: pass", timeout_s=0.5).timed_out
            assert sandbox.restarts == 2
            assert sandbox.run("print('alive')").stdout == "alive\n"

    def test_restart_after_the_worker_crashed(self, tier: Tier):
        with Sandbox(tier=tier, limits=TEST_LIMITS) as sandbox:
            assert sandbox.run("print(1)").ok
            worker = sandbox._idle.queue[0]
            assert worker._proc is not None
            os.killpg(worker._proc.pid, 9)
            worker._proc.wait()
            assert sandbox.run("print(2)").stdout == "2\n"
            assert sandbox.restarts == 1

    def test_parallel_callers_share_the_workers(self, tier: Tier):
        results: list[str] = []
        with Sandbox(tier=tier, limits=TEST_LIMITS, workers=2) as sandbox:
            threads = [
                threading.Thread(target=lambda i=i: results.append(sandbox.run(f"print({i})").stdout))
                for i in range(6)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert sorted(results) == [f"{i}\n" for i in range(6)]

    def test_bad_pool_config_names_the_field(self):
        with pytest.raises(ConfigError) as err:
            Sandbox(workers=0)
        assert err.value.field == "workers"

    def test_run_outside_with_is_an_error(self):
        require_tier(detect_tier())
        sandbox = Sandbox()
        with pytest.raises(RuntimeFailure, match="not started"):
            sandbox.run("print(1)")

    def test_arun(self, tier: Tier):
        with Sandbox(tier=tier, limits=TEST_LIMITS) as sandbox:
            res = asyncio.run(sandbox.arun("print('async')"))
        assert res.stdout == "async\n"
