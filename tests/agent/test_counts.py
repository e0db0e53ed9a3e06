"""The count check: "how many <things>" is answered by a whole number of them, at least 0."""

from __future__ import annotations

import pytest

from retryctl.agent._counts import (
    COUNTS_CHECK,
    count_finding,
    counted_things,
    whole_counts,
    with_count_finding,
)
from retryctl.agent._members import AnswerBackend, ToolBackend
from retryctl.controller import Observation, Tally, decide
from retryctl.testing import ScriptedBackend
from retryctl.tools import CalculatorTool

PENS = "Omar had 66 pens and gave away 18. How many pens are left?"


class TestCountFinding:
    @pytest.mark.parametrize(
        ("question", "thing"),
        [
            (PENS, "pens"),
            ("Lily has 9 ribbons and Ann 25. How many more ribbons does Ann have?", "ribbons"),
            ("There are 4 and 5. How many are there?", "things"),
            ("What is 17 * 23?", None),
            ("It was 3 degrees and fell by 5. How many degrees is it now?", None),  # may be negative
        ],
    )
    def test_what_the_question_counts(self, question: str, thing: str | None) -> None:
        assert counted_things(question) == thing

    def test_a_negative_count_is_named(self) -> None:
        assert count_finding(PENS, "-48") == "'how many pens' is a count of pens, and -48 is negative"
        assert count_finding(PENS, "48") is None

    @pytest.mark.parametrize("answer", ["3.5", "7/2"])
    def test_a_fraction_of_things_is_named(self, answer: str) -> None:
        question = "Dan shares 7 grapes among 2 friends. How many grapes does each get?"
        assert count_finding(question, answer) == (
            f"'how many grapes' asks for a whole number of grapes, and {answer} is not one"
        )

    def test_a_measure_may_be_a_fraction_but_not_negative(self) -> None:
        question = "Ann walks 5 miles in 2 days. How many miles a day?"
        assert count_finding(question, "2.5") is None
        assert count_finding(question, "-2.5") is not None

    def test_no_count_or_no_number_is_no_finding(self) -> None:
        assert count_finding("What is 7 - 9?", "-2") is None
        assert count_finding(PENS, None) is None
        assert count_finding(PENS, "many") is None


class TestValidator:
    def test_reads_the_members_finding_back(self) -> None:
        text = with_count_finding("18 - 66 = -48", PENS, "-48")
        result = whole_counts(text)
        assert (result.name, result.passed) == (COUNTS_CHECK, False)
        assert result.evidence == "'how many pens' is a count of pens, and -48 is negative"
        assert whole_counts("66 - 18 = 48").passed
        assert with_count_finding("66 - 18 = 48", PENS, "48") == "66 - 18 = 48"

    def test_its_finding_reaches_the_refine_feedback(self) -> None:
        text = with_count_finding("The answer is -48.", PENS, "-48")
        verdict = decide(
            Observation(
                target="m",
                tally=Tally.of(["-48", "-48", "-48"]),
                validators=[whole_counts(text)],
            )
        )
        assert verdict.action == "refine"
        assert "-48 is negative" in (verdict.feedback or "")


class TestMembersWriteTheFinding:
    def test_the_tool_member(self) -> None:
        model = ScriptedBackend(['{"expression": "18 - 66"}'], model="m")
        [cand] = ToolBackend(model, CalculatorTool()).sample_sync([{"role": "user", "content": PENS}])
        assert cand.answer == "-48"  # the answer stands; the check fails it as the step's validator
        assert cand.text.startswith("18 - 66 = -48 (count check: 'how many pens'")
        assert not whole_counts(cand.text).passed

    def test_the_answer_member(self) -> None:
        model = ScriptedBackend(["The answer is -48."], model="m")
        [cand] = AnswerBackend(model).sample_sync([{"role": "user", "content": PENS}])
        assert not whole_counts(cand.text).passed
        model = ScriptedBackend(["The answer is 48."], model="m")
        [cand] = AnswerBackend(model).sample_sync([{"role": "user", "content": PENS}])
        assert cand.text == "The answer is 48."


def test_a_refine_rounds_quoted_finding_gives_the_question_no_number() -> None:
    from retryctl.agent._members import ungrounded_numbers

    finding = whole_counts(with_count_finding("18 - 66 = -48", PENS, "-48")).evidence
    asked = [
        {"role": "user", "content": PENS},
        {"role": "user", "content": f"The answer failed these checks: whole_counts: {finding}. Correct it."},
    ]
    assert ungrounded_numbers("66 - 18 + 48 - 48", asked) == ["48"]
