"""``retryctl.banks`` reads a staged sample's per-stage fields, and banks recorded before stages existed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from retryctl.banks import RecordedStage, load_bank
from retryctl.exceptions import BankFormatError

OLD = {
    "id": "q1",
    "question": "2+3?",
    "gold": 5,
    "samples": [{"text": "5", "tokens": 1, "finish_reason": "stop"}],
}
THINK = {"name": "think", "tokens": 7, "finish_reason": "stop", "chars": 16, "prompt_tokens": 30}
ANSWER = {"name": "answer", "tokens": 2, "finish_reason": "length", "chars": 3}
NEW = {
    "id": "q2",
    "question": "2+4?",
    "gold": 6,
    "samples": [{"text": "2 and 4 make 6. The answer is 6.", "tokens": 9, "stages": [THINK, ANSWER]}],
}


def _bank(tmp_path: Path, *lines: dict[str, Any]) -> Path:
    path = tmp_path / "bank.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


class TestStages:
    def test_old_and_new_lines_are_read_side_by_side(self, tmp_path: Path) -> None:
        old, new = load_bank(_bank(tmp_path, OLD, NEW))
        assert old.samples[0].stages == () and old.samples[0].stage_texts() is None
        assert new.samples[0].stages == (
            RecordedStage(name="think", tokens=7, finish_reason="stop", chars=16, prompt_tokens=30),
            RecordedStage(name="answer", tokens=2, finish_reason="length", chars=3),
        )

    def test_stage_texts_split_the_text_in_order(self, tmp_path: Path) -> None:
        sample = load_bank(_bank(tmp_path, NEW))[0].samples[0]
        assert sample.stage_texts() == ("2 and 4 make 6. ", "The")

    def test_without_chars_the_parts_are_unknown(self, tmp_path: Path) -> None:
        line = {**NEW, "samples": [{"text": "x", "stages": [{"name": "think", "tokens": 1}]}]}
        sample = load_bank(_bank(tmp_path, line))[0].samples[0]
        assert sample.stages[0].chars is None and sample.stage_texts() is None

    @pytest.mark.parametrize(
        ("stages", "problem"),
        [
            ({"name": "think"}, "samples[0].stages must be a list"),
            (["think"], "samples[0].stages[0] must be an object"),
            ([{"tokens": 1}], "samples[0].stages[0].name must be a non-empty string"),
            ([{"name": "think"}], "samples[0].stages[0].tokens must be a whole number >= 0"),
            ([{"name": "think", "tokens": 1, "chars": -1}], "samples[0].stages[0].chars must be a whole"),
            (
                [{"name": "think", "tokens": 1, "finish_reason": 3}],
                "stages[0].finish_reason must be a string",
            ),
        ],
    )
    def test_a_malformed_stage_names_its_place(self, tmp_path: Path, stages: object, problem: str) -> None:
        line = {**NEW, "samples": [{"text": "x", "stages": stages}]}
        with pytest.raises(BankFormatError) as caught:
            load_bank(_bank(tmp_path, OLD, line))
        assert caught.value.line == 2 and problem in str(caught.value)
