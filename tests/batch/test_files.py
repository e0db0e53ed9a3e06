"""Task files and results files: malformed lines named, torn tails found and cut."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retryctl.batch import ResultsFile, Task, TaskFormatError, load_tasks, read_results


def _write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


class TestLoadTasks:
    def test_reads_tasks_in_order_and_skips_blank_lines(self, tmp_path: Path) -> None:
        path = _write(
            tmp_path / "t.jsonl",
            '{"id": "a", "question": "q1", "gold": 42}',
            "",
            '{"id": 7, "question": "q2"}',
        )
        assert load_tasks(path) == [Task(id="a", question="q1", gold="42"), Task(id="7", question="q2")]

    @pytest.mark.parametrize(
        ("bad", "problem"),
        [
            ("{not json", "not JSON"),
            ('["a"]', "JSON object"),
            ('{"question": "q"}', "'id'"),
            ('{"id": "x", "question": ""}', "'question'"),
            ('{"id": "x", "question": "q", "gold": [1]}', "'gold'"),
            ('{"id": "a", "question": "again"}', "duplicate id 'a' (first on line 1)"),
        ],
    )
    def test_malformed_line_is_named(self, tmp_path: Path, bad: str, problem: str) -> None:
        path = _write(tmp_path / "t.jsonl", '{"id": "a", "question": "q"}', bad)
        with pytest.raises(TaskFormatError) as info:
            load_tasks(path)
        assert info.value.line == 2 and info.value.path == str(path)
        assert problem in str(info.value) and str(info.value).startswith(f"{path}:2:")


class TestResultsFile:
    def test_appends_one_whole_line_per_result(self, tmp_path: Path) -> None:
        out = ResultsFile(tmp_path / "r.jsonl")
        out.append({"id": "a", "status": "accepted"})
        out.append({"id": "b", "status": "error"})
        out.close()
        state = read_results(tmp_path / "r.jsonl")
        assert [r["id"] for r in state.results] == ["a", "b"]
        assert state.finished == {"a"}  # an error line runs again on --resume
        assert state.torn_bytes == 0

    def test_torn_last_line_is_detected_and_cut(self, tmp_path: Path) -> None:
        path = tmp_path / "r.jsonl"
        whole = json.dumps({"id": "a", "status": "accepted"}) + "\n"
        path.write_text(whole + '{"id": "b", "stat')
        state = read_results(path)
        assert state.finished == {"a"} and state.torn_bytes == len('{"id": "b", "stat')
        out = ResultsFile(path)
        assert out.cut_bytes == state.torn_bytes
        out.append({"id": "b", "status": "stopped"})
        out.close()
        assert path.read_text() == whole + json.dumps({"id": "b", "status": "stopped"}, sort_keys=True) + "\n"

    def test_malformed_line_before_the_end_is_an_error(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "r.jsonl", '{"id": "a", "status": "stopped"}', "garbage", '{"id": "b"}')
        with pytest.raises(TaskFormatError) as info:
            read_results(path)
        assert info.value.line == 2

    def test_missing_file_is_empty(self, tmp_path: Path) -> None:
        assert read_results(tmp_path / "none.jsonl").results == []
