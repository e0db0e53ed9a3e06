"""Crash safety under SIGKILL (issue #7): a batch killed at seeded random points and restarted with
``--resume`` ends every task exactly once, never repeats a finished non-idempotent call, and leaves a
decision log whose chain verifies, a torn last line being cut and recorded, never kept.

*Finished*, in the tool journal's terms: a ``charge`` call is finished once its result record
``<thread>/<task>/<call id>/result/charge`` is committed to the journal (``ControlledToolNode`` writes it
right after the tool returns, before judging the result). From then on a resumed run must read the
record instead of calling. An execution killed before that commit is unfinished: nothing durable
says it ran, so it runs again. That at-least-once window is the best any journal can do for a side
effect outside its own transaction; the test allows exactly that and nothing more.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from retryctl.audit import DecisionLog, RepairRecord, VerdictRecord, read_records, verify_log
from retryctl.batch import read_results
from retryctl.cli import app
from retryctl.controller import Action, Verdict
from retryctl.exceptions import LogIntegrityError
from tests.reliability._crash_graph import DIR_ENV, EPOCH_ENV

GRAPH = "tests.reliability._crash_graph:make_graph"
ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("RETRYCTL_CRASH_SEED", "20240607"))
"""The kill points' seed; set ``RETRYCTL_CRASH_SEED`` to try others."""
TASKS = 30
KILLS = 8
RUN_TIMEOUT_S = 60.0


@dataclass
class Kill:
    """What the state on disk said right after one kill."""

    epoch: int
    finished: set[tuple[str, str]]
    """(task, call) pairs whose result record was committed to the journal."""
    done: set[str]
    """Tasks with a line in the results file."""


@dataclass
class Batch:
    """A batch's files and the process runs made on them."""

    root: Path
    kills: list[Kill] = field(default_factory=list)
    torn_tails: list[bytes] = field(default_factory=list)
    """Every torn log tail a repair must account for, in order (left by a kill, or injected)."""
    log_torn_at: list[int] = field(default_factory=list)
    """After which kill each of ``torn_tails`` was left."""
    results_torn_at: int = -1
    """After which kill a torn line was appended to the results file."""
    printed: list[str] = field(default_factory=list)
    """What each run printed, by epoch."""

    @property
    def tasks(self) -> Path:
        return self.root / "tasks.jsonl"

    @property
    def out(self) -> Path:
        return self.root / "results.jsonl"

    @property
    def log(self) -> Path:
        return self.root / "decisions.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints.sqlite"

    def start(self, epoch: int) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable,
            "-c",
            "from retryctl.cli import main; main()",
            "batch",
            str(self.tasks),
            "--out",
            str(self.out),
            "--log",
            str(self.log),
            "--graph",
            GRAPH,
            "--checkpoints",
            str(self.checkpoints),
            "--concurrency",
            "4",
            "--retry-wait",
            "0",
            "--breaker",
            "0",
        ]
        if epoch > 0:
            cmd.append("--resume")
        env = {**os.environ, DIR_ENV: str(self.root), EPOCH_ENV: str(epoch), "PYTHONPATH": str(ROOT)}
        stderr = (self.root / f"stderr.{epoch}").open("wb")
        with stderr:
            return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr)

    def finished_calls(self) -> set[tuple[str, str]]:
        with sqlite3.connect(self.root / "journal.sqlite") as db:
            keys = [k for (k,) in db.execute("SELECT key FROM retryctl_tool_journal")]
        pairs = set()
        for key in keys:
            # <thread>/<task (checkpoint_ns)>/<call id>/result/<tool>
            thread, *_task, call, kind, tool = key.split("/") if key.count("/") >= 3 else ("", "", "", "")
            if (kind, tool) == ("result", "charge"):
                pairs.add((thread.removeprefix("batch-"), call))
        return pairs

    def effects(self) -> list[dict[str, str]]:
        path = self.root / "effects.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _run_until_exec(proc: subprocess.Popen[bytes], execs: int, delay_s: float) -> tuple[bool, str]:
    """Kill ``proc`` ``delay_s`` after its ``execs``-th tool execution; return whether it was killed
    (False: it ended first) and what it printed."""
    watchdog = threading.Timer(RUN_TIMEOUT_S, proc.kill)
    watchdog.start()
    printed: list[bytes] = []
    try:
        assert proc.stdout is not None
        seen = 0
        for line in proc.stdout:
            printed.append(line)
            if line.startswith(b"EXEC "):
                seen += 1
                if seen == execs:
                    # Not waiting for anything: the delay only moves the kill to a random point after
                    # the side effect (before the journal commit, in a log write, in a result write...).
                    time.sleep(delay_s)
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return True, b"".join(printed).decode()
        proc.wait()
        return False, b"".join(printed).decode()
    finally:
        watchdog.cancel()
        if proc.stdout is not None:
            proc.stdout.close()


def _tear(path: Path, rng: random.Random) -> bytes:
    """Append the front part of a copy of the last line, as a write cut short by a kill leaves it."""
    last = path.read_bytes().splitlines(keepends=True)[-1]
    torn = last[: rng.randrange(10, len(last) - 1)]
    with path.open("ab") as f:
        f.write(torn)
    return torn


def _tail(path: Path) -> bytes:
    """Bytes after the last newline (a torn last line), empty when the file ends cleanly."""
    data = path.read_bytes() if path.exists() else b""
    return data[data.rfind(b"\n") + 1 :]


@pytest.fixture(scope="module")
def crashed_batch(tmp_path_factory: pytest.TempPathFactory) -> Batch:
    """A batch of TASKS tasks killed KILLS times at seeded points, then resumed until it completed."""
    rng = random.Random(SEED)
    batch = Batch(tmp_path_factory.mktemp("crash"))
    # Each killed run prints at most 7 EXEC lines, so more calls than that guarantees every run
    # reaches its kill point, whatever the timing: draw the tasks again until there are.
    calls = 0
    while calls <= KILLS * 7:
        rows = [
            {
                "id": f"t{i:02d}",
                "question": f"charge t{i:02d} "
                + " ".join(str(rng.randint(1, 99)) for _ in range(rng.randint(1, 3))),
            }
            for i in range(TASKS)
        ]
        calls = sum(len(r["question"].split()) - 2 for r in rows)
    batch.tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tear_log_at = set(rng.sample(range(KILLS), 3))
    batch.results_torn_at = rng.randrange(KILLS)
    for epoch in range(KILLS):
        proc = batch.start(epoch)
        delay = rng.choice([0.0, rng.uniform(0, 0.03)])
        killed, printed = _run_until_exec(proc, execs=rng.randint(1, 7), delay_s=delay)
        batch.printed.append(printed)
        assert killed, f"run {epoch} ended before its kill: {(batch.root / f'stderr.{epoch}').read_text()}"
        done = {str(r["id"]) for r in read_results(batch.out).results}
        batch.kills.append(Kill(epoch=epoch, finished=batch.finished_calls(), done=done))
        left = _tail(batch.log)
        if left:  # a kill that really tore a line (a short write): the restart must repair it too
            batch.torn_tails.append(left)
            batch.log_torn_at.append(epoch)
        elif epoch in tear_log_at and batch.log.exists():
            batch.torn_tails.append(_tear(batch.log, rng))
            batch.log_torn_at.append(epoch)
        if epoch == batch.results_torn_at:
            with batch.out.open("ab") as f:
                f.write(b'{"id": "t00", "status": "acc')
    killed, printed = _run_until_exec(batch.start(KILLS), execs=10**9, delay_s=0.0)
    batch.printed.append(printed)
    assert not killed
    assert "status: accepted" in printed, (batch.root / f"stderr.{KILLS}").read_text()
    return batch


class TestKilledBatch:
    def test_every_task_ends_exactly_once_with_every_charge_accepted(self, crashed_batch: Batch) -> None:
        lines = [json.loads(line) for line in crashed_batch.out.read_text().splitlines()]
        tasks = [json.loads(line)["id"] for line in crashed_batch.tasks.read_text().splitlines()]
        assert Counter(line["id"] for line in lines) == Counter(tasks)
        assert {line["status"] for line in lines} == {"accepted"}
        assert len(crashed_batch.kills) == KILLS

    def test_no_finished_call_runs_again(self, crashed_batch: Batch) -> None:
        effects = crashed_batch.effects()
        for kill in crashed_batch.kills:
            later = {(e["task"], e["call"]) for e in effects if int(e["epoch"]) > kill.epoch}
            assert not later & kill.finished, f"finished before kill {kill.epoch}, run again after it"
        # Not vacuous: some kills left finished calls of tasks still running, which only the
        # journal kept from running again; and in the end every execution is journaled.
        guarded = [k for k in crashed_batch.kills if any(t not in k.done for t, _ in k.finished)]
        assert guarded, "no kill hit a task between a finished call and its result"
        assert crashed_batch.finished_calls() == {(e["task"], e["call"]) for e in effects}
        # A call ran more than once only when every earlier run of it was killed before it finished.
        runs: dict[tuple[str, str], list[int]] = defaultdict(list)
        for e in effects:
            runs[(e["task"], e["call"])].append(int(e["epoch"]))
        for pair, epochs in runs.items():
            for epoch in epochs[:-1]:
                assert pair not in crashed_batch.kills[epoch].finished, (pair, epochs)

    def test_results_come_from_the_journaled_execution_of_the_planned_calls(
        self, crashed_batch: Batch
    ) -> None:
        effects = crashed_batch.effects()
        last_exec = {(e["task"], e["call"]): e["exec"] for e in effects}
        for line in map(json.loads, crashed_batch.out.read_text().splitlines()):
            answer: dict[str, str] = json.loads(line["answer"])
            # Every execution belongs to the task's one plan: a restart never re-planned (new call
            # ids would charge again) a task whose plan was already checkpointed.
            assert {c for t, c in last_exec if t == line["id"]} == set(answer), line["id"]
            for call, content in answer.items():
                assert content.endswith(f"exec={last_exec[(line['id'], call)]}"), (line["id"], call)

    def test_the_log_verifies_and_names_a_final_verdict_for_every_call(self, crashed_batch: Batch) -> None:
        report = verify_log(crashed_batch.log)
        assert report.ok, report.error
        assert report.runs == TASKS
        accepted = {
            (r.run_id, r.step_id)
            for r in read_records(crashed_batch.log)
            if isinstance(r, VerdictRecord) and r.action is Action.ACCEPT
        }
        for line in map(json.loads, crashed_batch.out.read_text().splitlines()):
            for call in json.loads(line["answer"]):
                assert (line["id"], f"tool:charge:{call}") in accepted

    def test_a_torn_results_line_was_cut_on_the_next_start(self, crashed_batch: Batch) -> None:
        next_run = crashed_batch.printed[crashed_batch.results_torn_at + 1]
        assert "cut a torn last line (28 bytes)" in next_run
        assert sum("cut a torn last line" in p for p in crashed_batch.printed) == 1

    def test_each_torn_tail_was_cut_and_recorded_once(self, crashed_batch: Batch) -> None:
        repairs = [r for r in read_records(crashed_batch.log) if isinstance(r, RepairRecord)]
        assert len(crashed_batch.torn_tails) >= 3
        assert [(r.truncated_bytes, r.truncated_sha256) for r in repairs] == [
            (len(t), hashlib.sha256(t).hexdigest()) for t in crashed_batch.torn_tails
        ]

    def test_each_log_repair_was_reported_by_the_run_that_made_it(self, crashed_batch: Batch) -> None:
        said = [
            [int(n) for n in re.findall(r"repaired a torn last line left by a crash: cut (\d+) bytes", p)]
            for p in crashed_batch.printed
        ]
        expected: list[list[int]] = [[] for _ in crashed_batch.printed]
        for epoch, tail in zip(crashed_batch.log_torn_at, crashed_batch.torn_tails, strict=True):
            expected[epoch + 1].append(len(tail))
        assert said == expected


def _verdict() -> Verdict:
    return Verdict(action=Action.ACCEPT, reason="checks passed", confidence=1.0)


def _write(path: Path, n: int) -> list[dict[str, object]]:
    with DecisionLog(path, clock=lambda: 1_700_000_000.0) as log:
        return [
            log.record_verdict(
                _verdict(), run_id="r", step_id=f"s{i}", attempt=1, candidates_summary=None, latency_ms=0.0
            )
            for i in range(n)
        ]


class TestTornTail:
    def test_a_torn_last_line_is_reported_by_line_and_never_chained_onto(self, tmp_path: Path) -> None:
        path = tmp_path / "log.jsonl"
        _write(path, 3)
        data = path.read_bytes()
        cut = data[: data.rstrip(b"\n").rfind(b"\n") + 1 + 40]  # the third record, 40 bytes in
        path.write_bytes(cut)
        with pytest.raises(LogIntegrityError) as raised:
            DecisionLog(path)
        assert raised.value.line == 3 and "torn tail" in raised.value.problem
        report = verify_log(path)
        assert not report.ok and report.records == 2 and report.error is not None
        assert report.error.line == 3 and "torn tail" in report.error.problem
        assert path.read_bytes() == cut  # reporting changes nothing

    def test_repair_cuts_the_torn_bytes_and_records_what_it_cut(self, tmp_path: Path) -> None:
        path = tmp_path / "log.jsonl"
        written = _write(path, 3)
        data = path.read_bytes()
        keep = data.rstrip(b"\n").rfind(b"\n") + 1
        path.write_bytes(data[: keep + 40])
        torn = data[keep : keep + 40]
        with DecisionLog(path, repair=True, clock=lambda: 1_700_000_001.0) as log:
            log.record_verdict(
                _verdict(), run_id="r", step_id="after", attempt=1, candidates_summary=None, latency_ms=0.0
            )
        records = list(read_records(path))
        assert [r.kind for r in records] == ["verdict", "verdict", "repair", "verdict"]
        repair = records[2]
        assert isinstance(repair, RepairRecord)
        assert repair.truncated_bytes == 40 and repair.truncated_sha256 == hashlib.sha256(torn).hexdigest()
        assert repair.prev_hash == written[1]["hash"]  # chained onto the last whole record
        report = verify_log(path)
        assert report.ok and report.records == 4
        after = path.read_bytes()
        assert after.startswith(data[:keep]) and after.count(b"\n") == 4  # only whole records remain

    def test_the_batch_cli_reports_a_torn_log_it_is_not_resuming(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        log = tmp_path / "log.jsonl"
        _write(log, 2)
        with log.open("ab") as f:
            f.write(b'{"action":"acc')
        output = _batch_refuses(tmp_path, monkeypatch, log)
        assert f"{log}:3" in output and "torn tail" in output and "pass --resume" in output

    def test_resume_cuts_only_a_torn_line_never_a_damaged_record(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        log = tmp_path / "log.jsonl"
        _write(log, 2)
        data = log.read_bytes()
        at = data.rfind(b"checks passed")  # edit the last record only: it is the one a writer reads
        log.write_bytes(data[:at] + b"checks FAILED" + data[at + len(b"checks passed") :])
        output = _batch_refuses(tmp_path, monkeypatch, log, "--resume")
        assert f"{log}:2" in output and "hash mismatch" in output and "pass --resume" not in output
        assert "not appending to a broken chain" in output


def _batch_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: Path, *extra: str) -> str:
    """Run ``retryctl batch`` on a damaged ``log``: it must exit 2 and leave the log as it was."""
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    before = log.read_bytes()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "question": "charge a 1"}\n')
    out = tmp_path / "r.jsonl"
    checkpoints = ["--checkpoints", str(tmp_path / "checkpoints.sqlite")]
    args = ["batch", str(tasks), "--out", str(out), "--log", str(log), "--graph", GRAPH, *checkpoints, *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert log.read_bytes() == before  # neither cut behind the user's back nor appended to
    assert not (tmp_path / "effects.jsonl").exists()  # and no task ran
    return result.output
