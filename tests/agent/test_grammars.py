"""The numbers check compiled into grammars: llama.cpp's grammar sampler admits exactly what the check
accepts, on generated questions and expressions."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retryctl.agent._grammars import MAX_PERMUTED, OPERATOR_CHECK_BELOW, expression_ladder, grammar_for
from retryctl.agent._members import repeated_numbers, ungrounded_numbers, unused_numbers
from retryctl.agent._operators import uninvited_operators
from retryctl.models import Message
from tests.agent._gbnf import GbnfOracle
from tests.models.conftest import needs_llama


@pytest.fixture(scope="module")
def oracle() -> Iterator[GbnfOracle]:
    from retryctl.models import find_smollm2_gguf

    found = GbnfOracle(str(find_smollm2_gguf()))
    yield found
    found.close()


def _question(numbers: list[str], word: str) -> list[Message]:
    parts = [
        f"{n} {thing}"
        for n, thing in zip(numbers, ["apples", "pens", "cards", "boxes", "eggs"], strict=False)
    ]
    return [{"role": "user", "content": f"Ann has {' and '.join(parts)} {word}. How many are there?"}]


def _checked(expression: str, messages: list[Message]) -> bool:
    return not (
        ungrounded_numbers(expression, messages)
        or unused_numbers(expression, messages)
        or repeated_numbers(expression, messages)
        or uninvited_operators(expression, messages)
    )


_NUMBER = st.sampled_from(["2", "3", "5", "7", "8", "12", "15", "40", "2.5", "0", "1", "60", "100"])
_WORD = st.sampled_from(
    [
        "",
        "each day",
        "for a week",
        "by the dozen",
        "and half of them",
        "in a pair",
        "and none",
        "and loses some",
        "to share equally",
        "times over",
    ]
)


@st.composite
def _render(draw: st.DrawFn, leaves: list[str]) -> str:
    """A random expression over ``leaves`` in order, in the canonical spacing, with random (also
    redundant) parentheses."""
    if len(leaves) == 1:
        text = leaves[0]
    else:
        cut = draw(st.integers(1, len(leaves) - 1))
        op = draw(st.sampled_from(["+", "-", "*", "/"]))
        text = f"{draw(_render(leaves[:cut]))} {op} {draw(_render(leaves[cut:]))}"
    return f"({text})" if draw(st.integers(0, 3)) == 0 else text


@st.composite
def _case(draw: st.DrawFn) -> tuple[list[Message], str]:
    numbers = draw(st.lists(_NUMBER, min_size=1, max_size=4))
    messages = _question(numbers, draw(_WORD))
    leaves = draw(st.permutations(numbers))
    # Mutations: leave one out, use one twice, add a constant or a number from nowhere.
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["drop", "repeat", "add"]))
        if kind == "drop" and len(leaves) > 1:
            leaves.pop(draw(st.integers(0, len(leaves) - 1)))
        elif kind == "repeat":
            leaves.insert(draw(st.integers(0, len(leaves))), draw(st.sampled_from(leaves)))
        else:
            leaves.insert(draw(st.integers(0, len(leaves))), draw(_NUMBER))
    return messages, draw(_render(leaves))


@needs_llama
class TestStrictRungIsTheCheck:
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_case())
    def test_the_grammar_admits_exactly_what_the_check_accepts(
        self, oracle: GbnfOracle, case: tuple[list[Message], str]
    ) -> None:
        messages, expression = case
        [strict, *_] = expression_ladder(messages)
        assert strict.name == "permutations" and strict.gbnf is not None
        admitted = oracle.accepts(strict.gbnf, json.dumps({"expression": expression}))
        assert admitted == _checked(expression, messages), (messages[0]["content"], expression)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_case())
    def test_the_any_operator_rung_admits_exactly_what_the_relaxed_check_accepts(
        self, oracle: GbnfOracle, case: tuple[list[Message], str]
    ) -> None:
        messages, expression = case
        rung = grammar_for(messages, OPERATOR_CHECK_BELOW)
        assert rung is not None and rung.gbnf is not None
        admitted = oracle.accepts(rung.gbnf, json.dumps({"expression": expression}))
        if rung.name == "any-operator":  # the numbers check without the operations check
            relaxed = not (
                ungrounded_numbers(expression, messages)
                or unused_numbers(expression, messages)
                or repeated_numbers(expression, messages)
            )
            assert admitted == relaxed, (messages[0]["content"], expression)
        else:  # the question invites every operation: the next rung is ``numbers``
            assert rung.name == "numbers"

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_case())
    def test_the_numbers_rung_admits_what_uses_no_number_from_nowhere(
        self, oracle: GbnfOracle, case: tuple[list[Message], str]
    ) -> None:
        messages, expression = case
        wide = grammar_for(messages, 0.64)
        assert wide is not None and wide.name == "numbers" and wide.gbnf is not None
        admitted = oracle.accepts(wide.gbnf, json.dumps({"expression": expression}))
        assert admitted == (not ungrounded_numbers(expression, messages))

    @pytest.mark.parametrize(
        ("expression", "admitted"),
        [
            ("7 * 8 - 5", True),
            ("5 - (8 * 7)", True),
            ("7 * 8 - 5 * 1", False),  # 1 needs a word ("one", "half"...)
            ("7 * 8", False),  # leaves out 5
            ("7 * 8 - 5 - 5", False),  # 5 twice
            ("5 * 3 - 2", False),  # the old example's shape
            ("7*8-5", False),  # not the canonical spacing
            ("7 * 8 + 5", False),  # no word asks for +
        ],
    )
    def test_the_demo_question(self, oracle: GbnfOracle, expression: str, admitted: bool) -> None:
        question = "Mia has 7 boxes of 8 crayons. She loses 5 crayons. How many crayons does she have?"
        messages: list[Message] = [{"role": "user", "content": question}]
        strict = grammar_for(messages, 1.0)
        assert strict is not None and strict.gbnf is not None
        assert oracle.accepts(strict.gbnf, json.dumps({"expression": expression})) is admitted


class TestLadder:
    def test_narrow_to_wide_with_strictness(self) -> None:
        ladder = expression_ladder(_question(["7", "8", "5"], "by the dozen"))
        assert [(g.name, g.strictness) for g in ladder] == [
            ("permutations", 1.0),
            ("any-operator", 0.8),
            ("numbers", 0.64),
            ("expression", 0.5),
        ]
        assert "5, 7, 8, each as often as given" in ladder[0].description
        assert "12" in ladder[0].description  # "dozen" implies it
        assert [
            g.name if g else None for g in (grammar_for(_question(["3"], ""), s) for s in (0.7, 0.6, 0.3))
        ] == [
            "numbers",
            "expression",
            None,
        ]

    def test_too_many_numbers_start_at_the_numbers_rung(self) -> None:
        numbers = [str(n) for n in range(2, 3 + MAX_PERMUTED)]
        question: list[Message] = [{"role": "user", "content": " ".join(numbers)}]
        assert [g.name for g in expression_ladder(question)] == ["numbers", "expression"]

    def test_no_question_or_no_number_is_the_wide_rung_only(self) -> None:
        assert [g.name for g in expression_ladder([])] == ["expression"]
        assert [g.name for g in expression_ladder([{"role": "user", "content": "Why?"}])] == ["expression"]

    def test_the_checks_own_findings_are_not_the_question(self) -> None:
        finding = "the expression '5 * 3 - 2' uses 3 and 2, which are not in the question"
        question: list[Message] = [{"role": "user", "content": f"Ann has 9 pens. {finding}"}]
        assert expression_ladder(question)[0].description.startswith("9, each")


class TestExpressionMembersDecodeUnderTheLadder:
    QUESTION: list[Message] = [  # noqa: RUF012
        {"role": "user", "content": "Omar had 66 pens. He gave away 18 pens. How many pens are left?"}
    ]

    @pytest.mark.parametrize(
        ("strictness", "rung"),
        [(1.0, "permutations"), (0.8, "any-operator"), (0.64, "numbers"), (0.5, "expression")],
    )
    def test_the_rung_of_the_steps_strictness(self, strictness: float, rung: str) -> None:
        from retryctl.agent._members import ToolBackend
        from retryctl.models import SamplingParams
        from retryctl.testing import ScriptedBackend
        from retryctl.tools import CalculatorTool

        model = ScriptedBackend(['{"expression": "66 - 18"}'], model="m")
        member = ToolBackend(model, CalculatorTool())
        [cand] = member.sample_sync(self.QUESTION, SamplingParams(strictness=strictness))
        [call] = model.calls
        assert call.params.grammar is not None and call.params.grammar.name == rung
        assert call.params.grammar == member.grammar_at(self.QUESTION, strictness)
        assert cand.answer == "48"

    def test_below_every_rung_only_the_response_format_shapes_it(self) -> None:
        from retryctl.agent._members import ToolBackend
        from retryctl.testing import ScriptedBackend
        from retryctl.tools import CalculatorTool

        member = ToolBackend(ScriptedBackend(["{}"], model="m"), CalculatorTool())
        assert member.grammar_at(self.QUESTION, 0.3) is None

    def test_the_notes_say_what_the_grammar_allowed_and_what_the_model_chose(self) -> None:
        from retryctl.agent._members import ToolBackend
        from retryctl.models import Candidate
        from retryctl.testing import ScriptedBackend
        from retryctl.tools import CalculatorTool

        drawn = Candidate(text='{"expression": "66 - 18"}', model="m", grammar="permutations")
        [cand] = ToolBackend(ScriptedBackend([drawn], model="m"), CalculatorTool()).sample_sync(self.QUESTION)
        assert (
            "grammar 'permutations' allowed 18, 66, each as often as given, joined by -; "
            "the model chose 66 - 18"
        ) in cand.notes
