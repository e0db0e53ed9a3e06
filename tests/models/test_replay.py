from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from retryctl.banks import load_bank
from retryctl.exceptions import BankFormatError, ConfigError
from retryctl.models import ReplayBackend, ReplayExhausted, random_order


def write_bank(tmp_path: Path, lines: list[object]) -> Path:
    path = tmp_path / "bank.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


QUESTIONS = [
    {"id": "q1", "question": "Q: one?", "gold": "1", "samples": [
        {"text": "a1", "answer": "1", "token_logprobs": [-0.1, -0.2]},
        {"text": "a2", "answer": "2"},
        {"text": "a3"},
    ]},
    {"id": "q2", "question": "Q: two?", "gold": "2", "samples": [{"text": "b1"}]},
]  # fmt: skip


class TestLoadBank:
    def test_reads_questions_and_samples(self, tmp_path):
        bank = load_bank(write_bank(tmp_path, QUESTIONS))
        assert [q.id for q in bank] == ["q1", "q2"]
        assert bank[0].samples[0].token_logprobs == (-0.1, -0.2)
        assert bank[0].samples[2].answer is None

    @pytest.mark.parametrize(
        ("line", "problem"),
        [
            ("not json", "Expecting value"),
            ([1], "JSON object"),
            ({"id": "x", "question": "q", "gold": "g", "samples": []}, "'samples' is empty"),
            ({"question": "q", "gold": "g", "samples": [{"text": "a"}]}, "'id'"),
            ({"id": "x", "question": "q", "samples": [{"text": "a"}]}, "'gold'"),
            ({"id": "x", "question": "q", "gold": "g", "samples": [{"answer": "a"}]}, "samples[0]"),
            (
                {
                    "id": "x",
                    "question": "q",
                    "gold": "g",
                    "samples": [{"text": "a", "token_logprobs": ["x"]}],
                },
                "numbers",
            ),
        ],
    )
    def test_bad_lines_name_file_and_line(self, tmp_path, line, problem):
        path = tmp_path / "bad.jsonl"
        bad = line if isinstance(line, str) else json.dumps(line)
        path.write_text(json.dumps(QUESTIONS[1]) + "\n" + bad + "\n")
        with pytest.raises(BankFormatError) as info:
            load_bank(path)
        assert info.value.line == 2 and problem in info.value.problem

    def test_duplicate_ids(self, tmp_path):
        with pytest.raises(BankFormatError, match="duplicate"):
            load_bank(write_bank(tmp_path, [QUESTIONS[1], QUESTIONS[1]]))

    def test_reads_the_shared_bank(self, shared_bank_path):
        bank = load_bank(shared_bank_path)
        assert len(bank) == 500 and all(len(q.samples) == 40 for q in bank)


class TestReplayBackend:
    def test_serves_in_order_k_at_a_time_then_exhausts(self, tmp_path):
        backend = ReplayBackend.from_file(write_bank(tmp_path, QUESTIONS), orders={"q1": [2, 0, 1]})
        msgs = [{"role": "user", "content": "Q: one?"}]
        first = backend.sample_sync(msgs, k=2)
        assert [c.text for c in first] == ["a3", "a1"]
        assert first[1].answer == "1" and first[1].token_logprobs == (-0.1, -0.2)
        assert first[0].logprobs is None and first[0].model == "replay:bank"
        [last] = asyncio.run(backend.sample(msgs))
        assert last.text == "a2"
        with pytest.raises(ReplayExhausted, match="0 left"):
            backend.sample_sync(msgs)
        backend.reset()
        assert backend.sample_sync(msgs)[0].text == "a3"

    def test_question_found_by_text_or_id_and_unknown_is_an_error(self, tmp_path):
        backend = ReplayBackend(load_bank(write_bank(tmp_path, QUESTIONS)))
        assert backend.sample_sync([{"role": "user", "content": " Q: two? "}])[0].text == "b1"
        assert backend.question_id([{"role": "user", "content": "q1"}]) == "q1"
        with pytest.raises(ConfigError, match="matches no question"):
            backend.sample_sync([{"role": "user", "content": "Q: three?"}])

    def test_bad_orders_name_the_question(self, tmp_path):
        bank = load_bank(write_bank(tmp_path, QUESTIONS))
        with pytest.raises(ConfigError, match=r"orders\[q1\]"):
            ReplayBackend(bank, orders={"q1": [0, 0, 1]})
        with pytest.raises(ConfigError, match="no such question"):
            ReplayBackend(bank, orders={"q9": [0]})

    def test_random_order_follows_the_bench_recipe(self, tmp_path):
        [q1, _] = load_bank(write_bank(tmp_path, QUESTIONS))
        assert random_order(q1, random.Random(7)) == random.Random(7).sample(range(3), 3)
