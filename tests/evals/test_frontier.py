"""The agent's operating point against its members' risk–coverage curves and the oracle, by hand."""

from __future__ import annotations

from typing import Any

import pytest

from retryctl.evals import Graded, oracle_rows, precision_at, scores, selective


def _line(task: str, gold: str, **systems: dict[str, Any]) -> dict[str, Any]:
    return {"id": task, "gold": gold, "systems": systems}


class TestPrecisionAt:
    def test_the_first_point_at_or_past_the_coverage(self) -> None:
        curve = [(0.25, 0.0), (0.75, 1 / 3), (1.0, 0.5)]
        assert precision_at(curve, 0.25) == 1.0
        assert precision_at(curve, 0.3) == pytest.approx(2 / 3)  # ties enter together
        assert precision_at(curve, 1.0) == 0.5
        assert precision_at([], 0.3) is None


class TestOracle:
    def test_answerable_by_some_majority_or_some_sample_and_model_at_1_is_no_member(self) -> None:
        lines = [
            _line("t1", "7", **{"calculator@8": {"correct": True, "answers": ["7"]}}),
            _line("t2", "9", **{"python@8": {"correct": False, "answers": ["8", "9", "8"]}}),
            _line(
                "t3",
                "5",
                **{
                    "model@1": {"correct": True, "answers": ["5"]},
                    "model@20": {"correct": False, "answers": ["4"]},
                },
            ),
        ]
        assert oracle_rows(lines) == {
            "tasks": 3,
            "majority": pytest.approx(1 / 3),
            "any_sample": pytest.approx(2 / 3),
        }

    def test_no_lines_no_oracle(self) -> None:
        assert oracle_rows([])["tasks"] == 0
        figures = {"agent": scores([Graded(0.9, True)])}
        assert selective(figures, [])["oracle"] == {}


class TestSelective:
    def test_the_agent_against_the_best_member_at_its_coverage(self) -> None:
        # Four tasks. The agent accepts two, one right: (coverage 0.5, precision 0.5).
        agent = [
            Graded(0.9, True),
            Graded(0.85, False),
            Graded(0.2, False, accepted=False),
            Graded(0.1, False, accepted=False),
        ]
        # calculator: its two most confident right, so 1.0 at coverage 0.5; python: 0.5 there.
        calc = [Graded(0.9, True), Graded(0.8, True), Graded(0.5, False), Graded(0.4, False)]
        python = [Graded(0.9, True), Graded(0.8, False), Graded(0.5, True), Graded(0.4, False)]
        lone = [Graded(1.0, True)] * 4  # model@1 is not a member, however good
        figures = {
            "agent": scores(agent),
            "calculator@8": scores(calc),
            "python@8": scores(python),
            "model@1": scores(lone),
        }
        lines = [
            _line(f"t{i}", "1", **{"calculator@8": {"correct": i < 2, "answers": ["1" if i < 3 else "0"]}})
            for i in range(4)
        ]
        got = selective(figures, lines)
        assert got["coverages"] == [0.3, 0.5]
        assert got["systems"]["calculator@8"]["precision_at"] == {"0.3": 1.0, "0.5": 1.0}
        assert got["systems"]["python@8"]["precision_at"] == {"0.3": 0.5, "0.5": 0.5}
        assert got["systems"]["agent"]["coverage"] == 0.5 and got["systems"]["agent"]["precision"] == 0.5
        point = got["agent"]
        assert (point["coverage"], point["precision"]) == (0.5, 0.5)
        assert point["best_member"] == "calculator@8" and point["best_member_precision"] == 1.0
        assert point["gap"] == pytest.approx(-0.5)
        # Majority answerable on 2 of 4, a sample on 3 of 4.
        assert got["oracle"]["majority"]["answerable"] == 0.5
        assert got["oracle"]["majority"]["precision_at"] == {"0.3": 1.0, "0.5": 1.0}
        assert got["oracle"]["any_sample"]["answerable"] == 0.75
        assert point["oracle_precision"] == {"majority": 1.0, "any_sample": 1.0}

    def test_past_the_answerable_share_the_oracle_must_answer_wrong(self) -> None:
        lines = [_line("t1", "1", **{"calculator@8": {"correct": True, "answers": ["1"]}}), _line("t2", "1")]
        figures = {"agent": scores([Graded(0.9, True), Graded(0.8, False)])}
        got = selective(figures, lines)
        assert got["oracle"]["majority"]["precision_at"]["0.5"] == 1.0
        assert got["agent"]["oracle_precision"]["majority"] == pytest.approx(
            0.5
        )  # coverage 1: half answerable
        assert got["agent"]["best_member"] is None and got["agent"]["gap"] is None

    def test_an_agent_that_accepted_nothing_has_no_point(self) -> None:
        figures = {"agent": scores([Graded(0.3, True, accepted=False)])}
        assert "agent" not in selective(figures, [])
