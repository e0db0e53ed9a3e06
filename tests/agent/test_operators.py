"""The operations a question's words ask for, and the expressions that use others."""

from __future__ import annotations

import pytest

from retryctl.agent._operators import OPERATIONS, invited_operators, uninvited_operators
from retryctl.models import Message


def _asked(question: str) -> list[Message]:
    return [{"role": "user", "content": question}]


class TestInvitedOperators:
    @pytest.mark.parametrize(
        ("question", "invited"),
        [
            ("There are 36 cookies on a table and 16 on a chair. How many are there in all?", ("+",)),
            ("Ana has 12 bottles and loses 7. How many bottles are left?", ("+", "-")),
            ("There are 9 vases with 6 flowers in each vase. How many flowers are there?", ("*", "/")),
            ("What is 7 + 5?", ("+",)),
            ("What is 3x4?", ("*",)),
            ("How many is 17?", OPERATIONS),  # no word asks for any: nothing is refused
        ],
    )
    def test_the_words_and_symbols_that_ask_for_each(self, question: str, invited: tuple[str, ...]) -> None:
        assert invited_operators(question) == invited


class TestUninvitedOperators:
    def test_a_product_for_a_sum_is_named(self) -> None:
        question = _asked("There are 36 cookies on a table and 16 cookies on a chair. How many in all?")
        assert uninvited_operators("36 * 16", question) == ["*"]
        assert uninvited_operators("36 + 16", question) == []

    def test_each_operator_once_in_order_and_a_negative_number_is_no_minus(self) -> None:
        question = _asked("Ann has 3 apples and 4 pears. How many fruits?")
        assert uninvited_operators("3 / 4 * 3 / 4", question) == ["*", "/"]
        assert uninvited_operators("-3 + 4", question) == []

    def test_the_checks_own_finding_quoted_back_asks_for_nothing(self) -> None:
        # A refine round quotes "uses *, which no word of the question asks for": "*" is not the user's.
        finding = "the expression '36 * 16' uses *, which no word of the question asks for"
        question = _asked(f"36 cookies and 16 cookies. How many in all? {finding}")
        assert uninvited_operators("36 * 16", question) == ["*"]

    def test_without_a_question_nothing_is_refused(self) -> None:
        assert uninvited_operators("3 * 4", [{"role": "system", "content": "x"}]) == []


class TestTheCheckRelaxesWithTheLadder:
    def test_below_the_invited_rung_any_operator_is_evaluated(self) -> None:
        from retryctl.agent._members import ToolBackend
        from retryctl.models import SamplingParams
        from retryctl.testing import ScriptedBackend
        from retryctl.tools import CalculatorTool

        question = _asked("There are 36 cookies on a table and 16 on a chair. How many in all?")
        drawn = ['{"expression": "36 * 16"}']
        strict = ToolBackend(ScriptedBackend(list(drawn), model="m"), CalculatorTool())
        [held] = strict.sample_sync(question, SamplingParams(strictness=1.0))
        assert held.answer is None and "uses *, which no word of the question asks for" in held.text
        relaxed = ToolBackend(ScriptedBackend(list(drawn), model="m"), CalculatorTool())
        [free] = relaxed.sample_sync(question, SamplingParams(strictness=0.8))
        assert (free.answer, free.text) == ("576", "36 * 16 = 576")
