"""Loading banks: answer keys, confidences, and malformed lines named by path and line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from retryctl.controller import token_confidence
from retryctl.exceptions import BankFormatError
from retryctl.replay import NO_ANSWER, code_bank
from tests.replay._banks import question, write_bank


class TestLoadBank:
    def test_answer_keys_are_normalised_and_coded(self, tmp_path: Path) -> None:
        bank = code_bank(
            write_bank(
                tmp_path / "b.jsonl",
                [question("q1", "12", ["12.0", "+12", "13", None]), question("q2", "Yes", ["YES "])],
            )
        )
        q1, q2 = bank.questions
        assert q1.keys == ("12", "13")
        assert q1.answers == (0, 0, 1, NO_ANSWER)
        assert q1.gold == 0 and q2.gold == 0 and q2.key(0) == "yes"
        assert q1.leader_share == pytest.approx(0.5)

    def test_text_is_used_when_answer_is_absent(self, tmp_path: Path) -> None:
        record = {
            "id": 1,
            "question": "?",
            "gold": 7,
            "samples": [{"text": "so the answer is 7."}, {"text": "The answer is 8", "answer": None}],
        }
        q = code_bank(write_bank(tmp_path / "b.jsonl", [record])).questions[0]
        assert q.id == "1" and q.keys == ("7", "8") and q.gold == 0

    def test_gold_never_given_is_no_answer(self, tmp_path: Path) -> None:
        q = code_bank(write_bank(tmp_path / "b.jsonl", [question("q", "x", ["y"])])).questions[0]
        assert q.gold == NO_ANSWER

    def test_confidence_is_the_geometric_mean_token_probability(self, tmp_path: Path) -> None:
        record = question("q", "a", ["a", "a"])
        record["samples"][0]["token_logprobs"] = [-0.1, -0.3]
        q = code_bank(write_bank(tmp_path / "b.jsonl", [record])).questions[0]
        assert q.confidences[0] == pytest.approx(math.exp(-0.2))
        assert q.confidences[1] is None and q.has_confidences

    def test_a_replay_measures_confidence_to_the_bit_as_a_live_run_does(self, tmp_path: Path) -> None:
        # Ten logprobs of -0.1: a plain float sum gives -0.9999999999999999, math.fsum -1.0, so the two
        # confidences differ in the last bits, enough to fall on either side of a threshold set there.
        logprobs = [-0.1] * 10
        assert sum(logprobs) != math.fsum(logprobs)  # the case is one where the two sums differ
        record = question("q", "a", ["a"])
        record["samples"][0]["token_logprobs"] = logprobs
        q = code_bank(write_bank(tmp_path / "b.jsonl", [record])).questions[0]
        # Exactly, not approximately: a threshold at the live value must accept the replayed sample.
        assert q.confidences[0] == token_confidence(logprobs).value

    def test_blank_lines_are_skipped(self, tmp_path: Path) -> None:
        bank = code_bank(write_bank(tmp_path / "b.jsonl", [question("q", "a", ["a"]), "", "  "]))
        assert len(bank.questions) == 1 and not bank.has_confidences


BAD_LINES = [
    ('{"id": "q", "question": ', "invalid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"id": "q", "question": "?", "gold": "a"}', "missing field 'samples'"),
    ('{"id": "q", "question": "?", "gold": "a", "samples": []}', "'samples' is empty"),
    ('{"id": "q", "question": "?", "gold": "a", "samples": "x"}', "'samples' must be a list"),
    ('{"id": "q", "question": 3, "gold": "a", "samples": [{"text": "a"}]}', "'question' must"),
    ('{"id": [], "question": "?", "gold": "a", "samples": [{"text": "a"}]}', "'id' must"),
    ('{"id": "q", "question": "?", "gold": {}, "samples": [{"text": "a"}]}', "'gold' must"),
    ('{"id": "q", "question": "?", "gold": "a", "samples": [{"answer": "a"}]}', "samples[0].text"),
    ('{"id": "q", "question": "?", "gold": "a", "samples": [3]}', "samples[0] must be an object"),
    (
        '{"id": "q", "question": "?", "gold": "a", "samples": [{"text": "a", "answer": [1]}]}',
        "samples[0].answer",
    ),
    (
        '{"id": "q", "question": "?", "gold": "a", "samples": [{"text": "a", "token_logprobs": ["x"]}]}',
        "token_logprobs must be a list of numbers",
    ),
    (
        '{"id": "q", "question": "?", "gold": "a", "samples": [{"text": "a", "token_logprobs": [0.5]}]}',
        "log-probabilities",
    ),
]


class TestBankFormatErrors:
    @pytest.mark.parametrize(("line", "problem"), BAD_LINES)
    def test_bad_line_names_path_and_line(self, tmp_path: Path, line: str, problem: str) -> None:
        path = write_bank(tmp_path / "bad.jsonl", [question("ok", "a", ["a"]), "", line])
        with pytest.raises(BankFormatError) as info:
            code_bank(path)
        assert info.value.line == 3
        assert info.value.path == str(path)
        assert problem in info.value.problem
        assert str(info.value).startswith(f"{path}:3: ")

    def test_non_utf8_line_is_named(self, tmp_path: Path) -> None:
        path = write_bank(tmp_path / "latin.jsonl", [question("q", "a", ["a"])])
        path.write_bytes(path.read_bytes() + b'{"id": "\xe9"}\n')
        with pytest.raises(BankFormatError) as info:
            code_bank(path)
        assert info.value.line == 2 and "not UTF-8" in info.value.problem

    def test_empty_bank(self, tmp_path: Path) -> None:
        path = tmp_path / "empty.jsonl"
        path.write_text("\n", encoding="utf-8")
        with pytest.raises(BankFormatError, match="no questions"):
            code_bank(path)

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError):
            code_bank(tmp_path / "nope.jsonl")
