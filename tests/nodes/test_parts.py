"""The small parts of retryctl.nodes: reply parsing, journals, backoff."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from tenacity.wait import wait_fixed

from retryctl.nodes import MemoryToolJournal, SQLiteToolJournal, UserReply, WaitRetryAfter, parse_reply
from retryctl.nodes._backoff import backoff_seconds


class TestParseReply:
    def test_strings(self) -> None:
        assert parse_reply("accept") == UserReply(action="accept")
        assert parse_reply("stop") == UserReply(action="stop")
        assert parse_reply("Paris") == UserReply(action="answer", answer="Paris")

    def test_dicts(self) -> None:
        reply = parse_reply({"action": "extend", "budget": {"samples": 4}})
        assert reply.budget == {"samples": 4.0}

    @pytest.mark.parametrize(
        ("raw", "problem"),
        [
            ({"action": "answer"}, "needs a non-empty 'answer'"),
            ({"action": "extend", "budget": {"bananas": 1}}, "unknown limit 'bananas'"),
            ({"action": "extend", "budget": {"samples": -1}}, "must be > 0"),
            ({"action": "retry"}, "action"),
        ],
    )
    def test_bad_replies_say_what_is_wrong(self, raw: object, problem: str) -> None:
        with pytest.raises(ValidationError, match=problem):
            parse_reply(raw)


class TestJournals:
    def test_memory_round_trip_is_a_copy(self) -> None:
        journal = MemoryToolJournal()
        record: dict[str, Any] = {"phase": "final", "n": [1]}
        journal.put("k", record)
        record["n"].append(2)
        assert journal.get("k") == {"phase": "final", "n": [1]}
        assert journal.get("missing") is None

    def test_sqlite_survives_reopening(self, tmp_path: Path) -> None:
        path = tmp_path / "j.sqlite"
        first = SQLiteToolJournal(path)
        first.put("thread/call", {"content": "sent"})
        first.close()
        second = SQLiteToolJournal(path)
        assert second.get("thread/call") == {"content": "sent"}
        second.put("thread/call", {"content": "replaced"})
        assert second.get("thread/call") == {"content": "replaced"}
        second.close()


class TestBackoff:
    def test_retry_after_raises_the_wait_and_is_capped(self) -> None:
        wait = WaitRetryAfter(wait_fixed(2), max_wait_s=30)
        assert backoff_seconds(wait, retry_number=1, retry_after_s=None) == 2
        assert backoff_seconds(wait, retry_number=1, retry_after_s=7) == 7
        assert backoff_seconds(wait, retry_number=1, retry_after_s=1) == 2
        assert backoff_seconds(wait, retry_number=1, retry_after_s=600) == 30

    def test_default_is_exponential(self) -> None:
        wait = WaitRetryAfter()
        # wait_exponential(multiplier=0.5): 0.5 · 2^(n-1)
        assert [backoff_seconds(wait, retry_number=n, retry_after_s=None) for n in (1, 2, 3)] == [0.5, 1, 2]
