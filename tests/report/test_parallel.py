"""Verification in a worker process gives the same reports as in this one, errors included."""

from __future__ import annotations

import json
from pathlib import Path

from retryctl.audit import verify_log
from retryctl.report import start_verification
from tests.report._logs import graph_log


class TestStartVerification:
    def test_worker_reports_equal_in_process_reports(self, tmp_path: Path) -> None:
        good = graph_log(tmp_path / "good.jsonl")
        bad = tmp_path / "bad.jsonl"
        lines = good.read_text().splitlines()
        record = json.loads(lines[1])
        record["reason"] = "edited"
        bad.write_text("\n".join([lines[0], json.dumps(record), *lines[2:]]) + "\n")
        paths = [str(good), str(bad)]
        forked = start_verification(paths, min_bytes=0)()
        local = [verify_log(p) for p in paths]
        assert [(r.path, r.ok, r.records, r.runs, r.head) for r in forked] == [
            (r.path, r.ok, r.records, r.runs, r.head) for r in local
        ]
        assert forked[1].error is not None and local[1].error is not None
        assert str(forked[1].error) == str(local[1].error)
        assert forked[1].error.line == 2

    def test_small_logs_are_verified_in_process(self, tmp_path: Path) -> None:
        good = graph_log(tmp_path / "good.jsonl")
        (report,) = start_verification([str(good)])()
        assert report.ok and report.records == len(good.read_text().splitlines())
