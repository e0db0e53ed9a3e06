"""Files (issue #12, item 5): retryctl never damages a file it was not asked to write.

Table by table, the real command line is given a path it must refuse: a missing or unwritable
directory, a directory, a FIFO or device, an output that is one of its inputs (same path, hard link,
symlink), a ``--resume``/``--log`` file that is not a retryctl results file or decision log, a log
whose chain is broken, a log whose records have fields of the wrong type. Each case must end with
exit 2 and exactly one ``error:`` line naming the path (and the line and field, for records), no
traceback, and every file that existed before holding the same bytes after. Cases that could hang (a
FIFO, ``/dev/zero``) run in a subprocess with a timeout, so a regression fails instead of hanging.

The writer's own failures are tested through its real write path: a torn tail written by another
process is refused on every write (never appended onto) and ``repair=True`` then cuts it; a write
that fails with ``ENOSPC`` (injected once, after a real partial write) leaves the file as it was, and
the next write, with space back, continues one valid chain.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from retryctl._paths import PathError, check_input, check_output
from retryctl.audit import DecisionLog, verify_log
from retryctl.audit._canonical import GENESIS_HASH, encode_line
from retryctl.batch import ResultsFile, read_results
from retryctl.cli import app
from retryctl.exceptions import LogIntegrityError, TaskFormatError
from tests.audit.helpers import make_verdict

GRAPH = "tests.batch._graphs:build"
RAISING = "tests.reliability._raising_graph:build"
ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

Setup = Callable[[Path], tuple[list[str], str]]
"""Makes the files of a case in a directory; returns the CLI arguments and what the error must name."""


# -- helpers -----------------------------------------------------------------------------------------


def _snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a regular file by its sha256, anything else by its kind."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "symlink -> " + os.readlink(path)
        elif path.is_fifo():
            out[str(path)] = "fifo"
        elif path.is_dir():
            out[str(path)] = "dir"
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _tasks(d: Path) -> Path:
    path = d / "tasks.jsonl"
    path.write_text('{"id": "a", "question": "add 1 2"}\n{"id": "b", "question": "add 2 3"}\n')
    return path


def _log(path: Path, records: int = 3) -> Path:
    """A real decision log of ``records`` verdicts."""
    with DecisionLog(path) as log:
        for i in range(records):
            log.record_verdict(
                make_verdict(),
                run_id="run-1",
                step_id="solve",
                attempt=i + 1,
                candidates_summary={"12": 2},
                latency_ms=3.0,
                target="m",
            )
    return path


def _rechained(path: Path, index: int, change: Callable[[dict[str, Any]], None]) -> Path:
    """``path`` with record ``index`` changed by ``change`` and every hash recomputed: the chain verifies."""
    records = [json.loads(line) for line in path.read_bytes().splitlines()]
    change(records[index])
    prev = GENESIS_HASH
    lines = []
    for rec in records:
        body = {k: v for k, v in rec.items() if k != "hash"}
        body["prev_hash"] = prev
        line, prev = encode_line(body)
        lines.append(line)
    path.write_bytes(b"".join(lines))
    assert verify_log(path).ok
    return path


def _result_line(task_id: str) -> str:
    line = {"id": task_id, "status": "accepted", "answer": "3", "tries": 1, "elapsed_s": 0.1}
    return json.dumps(line, sort_keys=True) + "\n"


def _unwritable_dir(d: Path) -> Path:
    """A directory this process cannot create files in (root ignores modes, but not /sys)."""
    if os.geteuid() == 0:
        return Path("/sys")
    locked = d / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    return locked


def _assert_one_error(code: int, stdout: str, stderr: str, names: str) -> str:
    assert code == 2, (code, stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stdout + stderr
    assert names in lines[0], (names, lines[0])
    return lines[0]


def _run_in_process(args: list[str]) -> tuple[int, str, str]:
    result = runner.invoke(app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def _run_subprocess(args: list[str]) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "retryctl.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,  # a FIFO that blocks the open, or /dev/zero read to the end, fails here
        cwd=ROOT,
        env=env,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


# -- the table ----------------------------------------------------------------------------------------


def batch_case(
    out: Callable[[Path], Path],
    *,
    log: Callable[[Path], Path] | None = None,
    checkpoints: Callable[[Path], Path] | None = None,
    tasks: Callable[[Path], Path] = _tasks,
    resume: bool = False,
    graph: str = GRAPH,
    names: Callable[[Path], str] | None = None,
) -> Setup:
    """A ``retryctl batch`` case; the error must name ``names(d)`` (default: the last path given)."""

    def setup(d: Path) -> tuple[list[str], str]:
        paths = [tasks(d), out(d)]
        args = ["batch", str(paths[0]), "--out", str(paths[1]), "--graph", graph]
        if log is not None:
            paths.append(log(d))
            args += ["--log", str(paths[-1])]
        if checkpoints is not None:
            paths.append(checkpoints(d))
            args += ["--checkpoints", str(paths[-1])]
        if resume:
            args.append("--resume")
        return args, names(d) if names is not None else str(paths[-1])

    return setup


def _fifo(name: str) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        path = d / name
        os.mkfifo(path)
        return path

    return make


def _file(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        path = d / name
        path.write_bytes(data)
        return path

    return make


def _new(name: str) -> Callable[[Path], Path]:
    return lambda d: d / name


def _dir(name: str) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        (d / name).mkdir()
        return d / name

    return make


def _hard_link(name: str, target: str) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        os.link(d / target, d / name)
        return d / name

    return make


def _symlink(name: str, target: str) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        (d / name).symlink_to(d / target)
        return d / name

    return make


def _broken_chain_log(d: Path) -> Path:
    path = _log(d / "log.jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"attempt":2', b'"attempt":7')  # edited, not re-hashed
    path.write_bytes(b"".join(lines))
    return path


def _results_then(tail: bytes) -> Callable[[Path], Path]:
    return _file("results.jsonl", _result_line("a").encode() + tail)


TEXT_3000 = b"notes " * 500  # 3000 bytes, no newline
PRETTY_JSON = json.dumps({"name": "config", "values": [1, 2]}, indent=2).encode() + b"\n"

BATCH: list[Any] = [
    # Where the outputs go.
    pytest.param(batch_case(lambda d: d / "missing" / "r.jsonl"), id="out-in-missing-directory"),
    pytest.param(batch_case(lambda d: _unwritable_dir(d) / "r.jsonl"), id="out-in-unwritable-directory"),
    pytest.param(batch_case(_dir("results")), id="out-is-a-directory"),
    pytest.param(batch_case(_new("r.jsonl"), log=lambda d: d / "missing" / "log.jsonl"),
                 id="log-in-missing-directory"),
    pytest.param(batch_case(_new("r.jsonl"), log=lambda d: _unwritable_dir(d) / "log.jsonl"),
                 id="log-in-unwritable-directory"),
    pytest.param(batch_case(_new("r.jsonl"), log=_dir("logs")), id="log-is-a-directory"),
    # An output that is an input, or the other output.
    pytest.param(batch_case(_new("same.jsonl"), log=_new("same.jsonl")), id="log-is-out-new"),
    pytest.param(batch_case(_results_then(b""), log=lambda d: d / "results.jsonl", resume=True),
                 id="log-is-out-existing"),
    pytest.param(batch_case(lambda d: d / "tasks.jsonl"), id="out-is-the-task-file"),
    pytest.param(batch_case(_hard_link("linked.jsonl", "tasks.jsonl")),
                 id="out-is-a-hard-link-to-the-task-file"),
    pytest.param(batch_case(_symlink("out.jsonl", "tasks.jsonl")), id="out-is-a-symlink-to-the-task-file"),
    pytest.param(batch_case(_new("r.jsonl"), log=_symlink("log.jsonl", "tasks.jsonl")),
                 id="log-is-a-symlink-to-the-task-file"),
    pytest.param(batch_case(_new("r.jsonl"), log=_new("log.jsonl"), checkpoints=_new("log.jsonl")),
                 id="checkpoints-is-the-log"),
    # --resume and --log only touch retryctl's own files.
    pytest.param(batch_case(_file("r.json", PRETTY_JSON), resume=True), id="resume-out-is-a-json-document"),
    pytest.param(batch_case(_file("notes.txt", TEXT_3000), resume=True),
                 id="resume-out-is-3000-bytes-without-newline"),
    pytest.param(batch_case(_file("r.jsonl", b'{"name": "x"}\n{"name": "y"}\n'), resume=True),
                 id="resume-out-is-another-tools-jsonl"),
    pytest.param(batch_case(_file("r.jsonl", b'{"name": "x"}'), resume=True),
                 id="resume-out-is-one-json-object-without-newline"),
    pytest.param(batch_case(_results_then(b"plain text tail"), resume=True),
                 id="resume-out-results-then-text-tail"),
    pytest.param(batch_case(_file("notes.txt", b"my notes\n")), id="out-is-a-text-file-without-resume"),
    pytest.param(batch_case(_new("r.jsonl"), log=_file("notes.txt", b"line one\nline two\n"), resume=True),
                 id="log-is-a-text-file"),
    pytest.param(batch_case(_new("r.jsonl"), log=_file("notes.txt", TEXT_3000), resume=True),
                 id="resume-log-is-3000-bytes-without-newline"),
    pytest.param(batch_case(_new("r.jsonl"), log=_file("cfg.json", b'{"a": 1}'), resume=True),
                 id="resume-log-is-a-json-object-without-newline"),
    pytest.param(batch_case(_new("r.jsonl"), log=_file("cfg.json", PRETTY_JSON)),
                 id="log-is-a-json-document"),
    pytest.param(batch_case(_new("r.jsonl"), log=_broken_chain_log), id="log-chain-broken"),
    pytest.param(batch_case(_new("r.jsonl"), log=_broken_chain_log, resume=True),
                 id="resume-log-chain-broken"),
    # A --graph factory that raises: named with its exception, in one line.
    pytest.param(batch_case(_new("r.jsonl"), graph=RAISING, names=lambda _: (
        f"--graph {RAISING}: loading the graph raised RuntimeError: MODEL_URL is not set"
    )), id="graph-factory-raises"),
]  # fmt: skip

BLOCKING: list[Any] = [
    # Non-regular files, refused before any open that could block or never end.
    pytest.param(batch_case(_new("r.jsonl"), tasks=_fifo("t.fifo"), names=lambda d: str(d / "t.fifo")),
                 id="batch-tasks-fifo"),
    pytest.param(batch_case(_fifo("out.fifo")), id="batch-out-fifo"),
    pytest.param(batch_case(_fifo("out.fifo"), resume=True), id="batch-out-fifo-resume"),
    pytest.param(batch_case(_new("r.jsonl"), log=_fifo("log.fifo")), id="batch-log-fifo"),
    pytest.param(batch_case(_new("r.jsonl"), checkpoints=_fifo("ck.fifo")), id="batch-checkpoints-fifo"),
    pytest.param(batch_case(lambda _: Path("/dev/full"), resume=True), id="batch-out-dev-full-resume"),
    pytest.param(batch_case(_new("r.jsonl"), tasks=lambda _: Path("/dev/zero"), names=lambda _: "/dev/zero"),
                 id="batch-tasks-dev-zero"),
    pytest.param(lambda d: (["bench", str(_fifo("bank.fifo")(d))], str(d / "bank.fifo")),
                 id="bench-bank-fifo"),
    pytest.param(lambda d: (["bench", "/dev/zero"], "/dev/zero"), id="bench-bank-dev-zero"),
    pytest.param(lambda d: (["audit", str(_fifo("log.fifo")(d))], str(d / "log.fifo")), id="audit-log-fifo"),
    pytest.param(lambda d: (["audit", str(_log(d / "l.jsonl")), "--html", str(_fifo("r.fifo")(d))],
                            str(d / "r.fifo")), id="audit-html-fifo"),
    pytest.param(lambda d: (["demo", "--log", str(_fifo("log.fifo")(d))], str(d / "log.fifo")),
                 id="demo-log-fifo"),
]  # fmt: skip


def _demo_log(make: Callable[[Path], Path]) -> Setup:
    def setup(d: Path) -> tuple[list[str], str]:
        path = make(d)
        return ["demo", "What is 2 + 3?", "--log", str(path)], f"--log {path}"

    return setup


DEMO: list[Any] = [
    # --log appends only to a decision log whose chain verifies; anything else is left as it is.
    pytest.param(_demo_log(_file("notes.txt", TEXT_3000)), id="demo-log-is-text"),
    pytest.param(_demo_log(_file("cfg.json", PRETTY_JSON)), id="demo-log-is-a-json-document"),
    pytest.param(_demo_log(_broken_chain_log), id="demo-log-chain-broken"),
]  # fmt: skip


def _bad_field(field: str, value: Any, *, index: int = 1) -> Setup:
    """``audit`` of a log whose record ``index`` has ``field`` (a dotted path) set to ``value``."""

    def change(rec: dict[str, Any]) -> None:
        *parents, last = field.split(".")
        holder = rec
        for key in parents:
            holder = holder[key]
        holder[last] = value

    def setup(d: Path) -> tuple[list[str], str]:
        path = _rechained(_log(d / "log.jsonl"), index, change)
        return ["audit", str(path)], f"{path}:{index + 1}: field {field!r}"

    return setup


def _summary_bad(field: str, value: Any, named: str | None = None) -> Setup:
    def setup(d: Path) -> tuple[list[str], str]:
        path = d / "log.jsonl"
        with DecisionLog(path) as log:
            log.record_summary(
                run_id="r", step_id="s", final_answer="12", sampling_history=["12"],
                budget_used={"samples": 3.0}, budget_max={"samples": 8.0},
            )  # fmt: skip
        _rechained(path, 0, lambda rec: rec.__setitem__(field, value))
        return ["audit", str(path)], f"{path}:1: field {named or repr(field)}"

    return setup


def _html_case(html: Callable[[Path], Path], names: Callable[[Path], str] | None = None) -> Setup:
    def setup(d: Path) -> tuple[list[str], str]:
        log = _log(d / "log.jsonl")
        target = html(d)
        return ["audit", str(log), "--html", str(target)], names(d) if names else str(target)

    return setup


def _why_bad_signal(d: Path) -> tuple[list[str], str]:
    path = _rechained(_log(d / "log.jsonl"), 2, lambda rec: rec["signals"].__setitem__("agreement", "high"))
    return ["audit", str(path), "--why", "run-1"], f"{path}:3: field 'signals.agreement'"


AUDIT: list[Any] = [
    # --html never overwrites a LOG, and its path problems are one line.
    pytest.param(_html_case(lambda d: d / "log.jsonl"), id="html-is-the-log"),
    pytest.param(_html_case(_symlink("report.html", "log.jsonl")), id="html-is-a-symlink-to-the-log"),
    pytest.param(_html_case(_hard_link("r.html", "log.jsonl")), id="html-is-a-hard-link-to-the-log"),
    pytest.param(_html_case(lambda d: d / "missing" / "r.html"), id="html-in-missing-directory"),
    pytest.param(_html_case(lambda d: _unwritable_dir(d) / "r.html"), id="html-in-unwritable-directory"),
    pytest.param(_html_case(_dir("reports")), id="html-is-a-directory"),
    # A chain that verifies over records of the wrong shape: the line and the field are named.
    pytest.param(_bad_field("attempt", "one"), id="field-attempt-string"),
    pytest.param(_bad_field("attempt", 1.5), id="field-attempt-float"),
    pytest.param(_bad_field("confidence", "high"), id="field-confidence-string"),
    pytest.param(_bad_field("confidence", True), id="field-confidence-bool"),
    pytest.param(_bad_field("answer", 42), id="field-answer-number"),
    pytest.param(_bad_field("target", {"name": "m"}), id="field-target-object"),
    pytest.param(_bad_field("error_class", ["a"]), id="field-error-class-list"),
    pytest.param(_bad_field("action", "explode"), id="field-action-unknown"),
    pytest.param(_bad_field("reason", None), id="field-reason-null"),
    pytest.param(_bad_field("run_id", 5), id="field-run-id-number"),
    pytest.param(_bad_field("step_id", None), id="field-step-id-null"),
    pytest.param(_bad_field("budget.used.samples", "five"), id="field-budget-used-string"),
    pytest.param(_bad_field("thresholds.accept", "high"), id="field-threshold-string"),
    pytest.param(_bad_field("attempt", "one", index=0), id="field-bad-in-the-first-record"),
    pytest.param(_summary_bad("final_answer", 12), id="summary-final-answer-number"),
    pytest.param(_summary_bad("budget_used", {"samples": "x"}, "'budget_used.samples'"),
                 id="summary-budget-used-string"),
    pytest.param(_why_bad_signal, id="why-signal-string"),
]  # fmt: skip


class TestRefusedPaths:
    @pytest.mark.parametrize("setup", BATCH)
    def test_batch(self, tmp_path: Path, setup: Setup) -> None:
        self._check(tmp_path, setup, _run_in_process)

    @pytest.mark.parametrize("setup", AUDIT)
    def test_audit(self, tmp_path: Path, setup: Setup) -> None:
        self._check(tmp_path, setup, _run_in_process)

    @pytest.mark.parametrize("setup", BLOCKING)
    def test_non_regular_files_are_refused_at_once(self, tmp_path: Path, setup: Setup) -> None:
        self._check(tmp_path, setup, _run_subprocess)

    @pytest.mark.parametrize("setup", DEMO)
    def test_demo(self, tmp_path: Path, setup: Setup) -> None:
        # A subprocess: the demo checks the embedded build in a child process first.
        self._check(tmp_path, setup, _run_subprocess)

    @staticmethod
    def _check(d: Path, setup: Setup, run: Callable[[list[str]], tuple[int, str, str]]) -> None:
        args, names = setup(d)
        before = _snapshot(d)
        code, stdout, stderr = run(args)
        _assert_one_error(code, stdout, stderr, names)
        assert _snapshot(d) == before  # nothing created, nothing changed


class TestBrokenChainWithBadFields:
    def test_a_broken_chain_still_exits_1_and_names_the_skipped_record(self, tmp_path: Path) -> None:
        path = _log(tmp_path / "log.jsonl")
        lines = path.read_bytes().splitlines(keepends=True)
        lines[1] = lines[1].replace(b'"attempt":2', b'"attempt":"one"')  # edited, not re-hashed
        path.write_bytes(b"".join(lines))
        code, stdout, stderr = _run_in_process(["audit", str(path), "--json"])
        assert code == 1, stderr
        out = json.loads(stdout)
        assert out["verification"][0]["error"]["line"] == 2
        assert out["summary"]["overview"]["invalid_records"][0].startswith(f"{path}:2: field 'attempt'")
        assert stderr.count("warning: invalid record skipped") == 1


class TestResumeStillRepairsItsOwnFiles:
    """The other side of the rules: what a crash leaves in retryctl's own files is still cut on --resume."""

    def test_a_torn_result_and_a_torn_record_are_cut(self, tmp_path: Path) -> None:
        tasks = _tasks(tmp_path)
        out = tmp_path / "results.jsonl"
        out.write_text(_result_line("a") + '{"answer": "5", "elapsed')
        log = _log(tmp_path / "log.jsonl")
        with log.open("ab") as f:
            f.write(b'{"action":"accept","ans')
        code, _, stderr = _run_in_process(
            ["batch", str(tasks), "--out", str(out), "--log", str(log), "--graph", GRAPH, "--resume"]
        )
        assert code == 0, stderr
        assert [r["id"] for r in read_results(out).results] == ["a", "b"]
        report = verify_log(log)
        assert report.ok and report.records > 4, report.error


# -- the writer's own failures -------------------------------------------------------------------------


class _FailingWrite:
    """``os.write`` that, on call ``at``, writes half of what it is given and then fails with ``ENOSPC``."""

    def __init__(self, at: int = 1, *, partial: bool = True) -> None:
        self.at = at
        self.partial = partial
        self.calls = 0

    def __call__(self, fd: int, data: Any) -> int:
        self.calls += 1
        if self.calls == self.at:
            if self.partial:
                os.write(fd, data[: len(data) // 2])  # real bytes on disk, as a full disk leaves them
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(fd, data)


def _verdict(log: DecisionLog, attempt: int) -> dict[str, Any]:
    return log.record_verdict(
        make_verdict(), run_id="r", step_id="s", attempt=attempt, candidates_summary=None, latency_ms=1.0
    )


class TestDecisionLogTail:
    def test_a_torn_tail_from_another_process_is_refused_on_every_write(self, tmp_path: Path) -> None:
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            _verdict(log, 1)
            # Another process dies mid-line: its bytes end the file without a newline.
            cut_short = b'{"action":"stop","rea'
            script = f"open({str(path)!r}, 'ab').write({cut_short!r})"
            other = subprocess.run([sys.executable, "-c", script], check=True)
            assert other.returncode == 0
            torn = path.read_bytes()
            for attempt in (2, 3, 4):  # not once: every time, and never onto the torn bytes
                with pytest.raises(LogIntegrityError, match="torn tail"):
                    _verdict(log, attempt)
                assert path.read_bytes() == torn
        with DecisionLog(path, repair=True) as repaired:
            assert repaired.repaired_bytes == len(cut_short)
            _verdict(repaired, 2)
        report = verify_log(path)
        assert report.ok and report.records == 3  # the first verdict, the repair record, the new one

    def test_enospc_mid_line_leaves_the_file_as_it_was_and_the_log_continues(self, tmp_path: Path) -> None:
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            _verdict(log, 1)
            before = path.read_bytes()
            log._sink._write = _FailingWrite(at=1)
            with pytest.raises(OSError) as info:
                _verdict(log, 2)
            assert info.value.errno == errno.ENOSPC
            assert path.read_bytes() == before  # the half line was cut again
            written = _verdict(log, 2)  # space is back
            assert written["prev_hash"] == json.loads(before)["hash"]
        report = verify_log(path)
        assert report.ok and report.records == 2

    def test_a_failed_write_whose_bytes_cannot_be_cut_is_never_appended_onto(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            _verdict(log, 1)
            log._sink._write = _FailingWrite(at=1)

            def no_truncate(fd: int, length: int) -> None:
                raise OSError(errno.EIO, "cannot truncate")

            monkeypatch.setattr("retryctl.audit._sink.os.ftruncate", no_truncate)
            with pytest.raises(OSError):
                _verdict(log, 2)
            torn = path.read_bytes()
            assert not torn.endswith(b"\n")
            monkeypatch.undo()
            with pytest.raises(LogIntegrityError, match="torn tail"):
                _verdict(log, 2)  # the next write re-checked the tail instead of trusting its cache
            assert path.read_bytes() == torn
        with DecisionLog(path, repair=True) as repaired:
            _verdict(repaired, 2)
        assert verify_log(path).ok

    def test_repair_never_cuts_a_file_that_is_not_a_decision_log(self, tmp_path: Path) -> None:
        for data in (TEXT_3000, b"line one\nline two", b'{"a": 1}', PRETTY_JSON[:-1]):
            path = tmp_path / "not-a-log.txt"
            path.write_bytes(data)
            with pytest.raises(LogIntegrityError):
                DecisionLog(path, repair=True)
            assert path.read_bytes() == data

    def test_a_device_is_refused(self) -> None:
        with pytest.raises(PathError, match="character device"):
            DecisionLog("/dev/full")


class TestResultsFileWrites:
    def test_enospc_mid_line_leaves_the_results_as_they_were(self, tmp_path: Path) -> None:
        path = tmp_path / "results.jsonl"
        results = ResultsFile(path)
        results.append({"id": "a", "status": "accepted"})
        before = path.read_bytes()
        results._write = _FailingWrite(at=1)
        with pytest.raises(OSError):
            results.append({"id": "b", "status": "accepted"})
        assert path.read_bytes() == before
        results.append({"id": "b", "status": "stopped"})
        results.close()
        assert [r["id"] for r in read_results(path).results] == ["a", "b"]

    def test_a_file_that_is_not_results_is_refused_and_kept(self, tmp_path: Path) -> None:
        path = tmp_path / "notes.txt"
        path.write_bytes(TEXT_3000)
        with pytest.raises(TaskFormatError, match="not a retryctl results file"):
            ResultsFile(path)
        assert path.read_bytes() == TEXT_3000


class TestPathChecks:
    """The shared checks, directly: what each says, in one line naming the path."""

    def test_inputs(self, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / "p")
        (tmp_path / "d").mkdir()
        cases = {
            tmp_path / "none": "no such file",
            tmp_path / "p": "is a FIFO",
            tmp_path / "d": "is a directory",
            Path("/dev/null"): "is a character device",
        }
        for path, problem in cases.items():
            with pytest.raises(PathError, match=problem) as info:
                check_input(path, "task file")
            assert str(info.value).startswith(f"task file {path}: ")

    def test_outputs(self, tmp_path: Path) -> None:
        src = tmp_path / "in.jsonl"
        src.write_text("x\n")
        with pytest.raises(PathError, match="same file as the task file"):
            check_output(tmp_path / "." / "in.jsonl", "--out", inputs=[(src, "the task file")])
        assert check_output(tmp_path / "new.jsonl", "--out", inputs=[(src, "the task file")])
        assert not (tmp_path / "new.jsonl").exists()  # the probe leaves nothing behind
        with pytest.raises(PathError, match="not a directory"):
            check_output(src / "x.jsonl", "--out")
        with pytest.raises(PathError) as info:
            check_output(tmp_path / "a\nb", "--out", inputs=[(tmp_path / "a\nb", "--log")])
        assert "\n" not in str(info.value)
