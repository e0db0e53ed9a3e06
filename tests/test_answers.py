import pytest
from hypothesis import given
from hypothesis import strategies as st

from retryctl._answers import (
    AnswerEquivalence,
    answers_agree,
    default_equivalence,
    extract_answer_is,
    extract_last_number,
    normalise_number,
    normalise_text,
)


class TestNormaliseNumber:
    @pytest.mark.parametrize(
        ("raw", "key"),
        [
            ("12", "12"),
            ("12.0", "12"),
            ("+12", "12"),
            ("1,200", "1200"),
            ("0.50", "0.5"),
            ("1/3", "1/3"),
            ("2/4", "0.5"),
            ("$5", "5"),
            ("-3.", "-3"),
            ("1e3", "1000"),
        ],
    )
    def test_equal_values_share_a_key(self, raw, key):
        assert normalise_number(raw) == key

    @pytest.mark.parametrize("raw", ["twelve", "1/0", "12 apples", ""])
    def test_non_numbers_are_none(self, raw):
        assert normalise_number(raw) is None

    @given(st.integers(min_value=-(10**30), max_value=10**30))
    def test_integer_and_its_decimal_form_agree(self, n):
        assert normalise_number(str(n)) == normalise_number(f"{n}.0") == str(n)


class TestNormaliseText:
    def test_case_space_quotes_and_final_punctuation(self):
        assert normalise_text('  "Yajo".  ') == normalise_text("yajo") == "yajo"
        assert normalise_text("New   York") == "new york"


class TestExtractors:
    def test_answer_is_takes_the_last_statement(self):
        text = "First the answer is 3. On reflection, the answer is 4."
        assert extract_answer_is(text) == "4"

    def test_last_number(self):
        assert extract_last_number("3 apples and 1,200 pears") == "1,200"
        assert extract_last_number("none") is None


class TestAnswerEquivalence:
    def test_phrasings_of_one_answer_agree(self):
        keys = {
            default_equivalence(t)
            for t in ["The answer is 12.", "Answer: 12.0", "so \\boxed{12}", "12", "Final answer = +12"]
        }
        assert keys == {"12"}

    def test_different_answers_differ(self):
        assert default_equivalence("The answer is 12.") != default_equivalence("The answer is 13.")

    def test_custom_extractor_and_normaliser(self):
        eq = AnswerEquivalence(extractors=(lambda t: t.split("=")[-1],), normalisers=(str.strip,))
        assert eq("x = 5 ") == "5"

    def test_nothing_extractable_is_none(self):
        assert default_equivalence("   ") is None


class TestAnswersAgree:
    @pytest.mark.parametrize(
        ("answer", "gold", "agree"),
        [
            ("42", " 42 ", True),
            ("42.0", "42", True),
            ("Paris", "paris", True),
            ("1,000", "1000", True),
            ("yes.", "Yes", True),  # final punctuation, as a vote drops it
            ("$12", "12", True),  # a currency sign, as a vote drops it
            ("1/2", "0.5", True),
            ("41", "42", False),
            ("x", "42", False),
            ("", "", False),  # nothing to compare is not agreement
        ],
    )
    def test_grading_is_loose_as_votes_are(self, answer: str, gold: str, agree: bool) -> None:
        assert answers_agree(answer, gold) is agree

    @given(st.text(max_size=12), st.text(max_size=12))
    def test_an_answer_is_gold_exactly_when_the_two_would_be_one_vote(self, answer: str, gold: str) -> None:
        # The audit's and the batch's accuracy use this; the controller's votes use the normalisers.
        same_vote = default_equivalence.normalise(answer) is not None and default_equivalence.normalise(
            answer
        ) == default_equivalence.normalise(gold)
        assert answers_agree(answer, gold) is same_vote
