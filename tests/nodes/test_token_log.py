"""What a step's verdict records carry per token under each ``token_log`` setting (scripted model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from retryctl.audit import DecisionLog
from retryctl.controller import Policy, TokenLog
from retryctl.nodes import ControlledStep
from retryctl.testing import ScriptedBackend, capture_verdicts


def _run(tmp_path: Path, token_log: TokenLog) -> list[dict[str, Any]]:
    log_path = tmp_path / "log.jsonl"
    with DecisionLog(log_path) as log:
        backend = ScriptedBackend(["The answer is 42", "It is 42", "I think 41"], confidence=0.7)
        step = ControlledStep(
            backend,
            policy=Policy(
                stopping="sc-3", min_samples=3, max_samples=3, accept_threshold=0.1, token_log=token_log
            ),
            log=log,
        )
        capture_verdicts(
            step.compile(), {"messages": [("user", "6 * 7?")]}, {"configurable": {"thread_id": "t"}}
        )
    rows = [json.loads(line) for line in log_path.read_text().splitlines()]
    return [r for r in rows if r["kind"] == "verdict"]


class TestTokenLog:
    def test_every_candidate_is_logged_by_default(self, tmp_path: Path) -> None:
        (verdict,) = _run(tmp_path, TokenLog())
        assert verdict["action"] == "accept"
        items = verdict["extra"]["token_samples"]
        assert [i["sample"] for i in items] == [0, 1, 2]
        assert [i["token_text"] for i in items] == [
            ["The", "answer", "is", "42"],
            ["It", "is", "42"],
            ["I", "think", "41"],
        ]
        assert [i["accepted"] for i in items].count(True) == 1
        chosen = verdict["candidates_summary"]["chosen"]
        assert items[chosen]["accepted"] and items[chosen]["answer"] == "42"
        assert all(len(i["token_logprobs"]) == i["tokens_total"] for i in items)

    def test_accepted_keeps_only_the_candidate_returned(self, tmp_path: Path) -> None:
        (verdict,) = _run(tmp_path, TokenLog(keep="accepted"))
        (item,) = verdict["extra"]["token_samples"]
        assert item["accepted"] and item["sample"] == verdict["candidates_summary"]["chosen"]

    def test_the_cap_bounds_the_tokens_of_each(self, tmp_path: Path) -> None:
        (verdict,) = _run(tmp_path, TokenLog(max_tokens=2))
        items = verdict["extra"]["token_samples"]
        assert all(len(i["token_text"]) == 2 for i in items)
        assert [i["tokens_total"] for i in items] == [4, 3, 3]

    def test_off_logs_nothing(self, tmp_path: Path) -> None:
        (verdict,) = _run(tmp_path, TokenLog(keep="off"))
        assert "token_samples" not in verdict["extra"]
