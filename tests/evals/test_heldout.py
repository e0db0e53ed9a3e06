"""The held-out family: one operation each, seeded, phrased unlike the development set."""

from __future__ import annotations

import re

import pytest

from retryctl.evals import HELDOUT_STRATUM, heldout_problems, word_problems


class TestHeldout:
    def test_one_operation_each_with_its_gold(self) -> None:
        problems = list(heldout_problems(40, seed=5))
        assert len(problems) == 40 and len({p.id for p in problems}) == 40
        for p in problems:
            assert p.id.startswith("ho-5-") and p.stratum == HELDOUT_STRATUM
            assert re.fullmatch(r"\d+ [-+*/] \d+", p.expression), p.expression
            a, op, b = p.expression.split()
            value = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__truediv__}[op](
                int(a), int(b)
            )
            assert p.gold == value and p.gold > 0
            for number in p.expression.split()[::2]:
                assert re.search(rf"\b{number}\b", p.question), (number, p.question)
        assert {p.expression.split()[1] for p in problems} == {"+", "-", "*", "/"}

    def test_seeded_and_reachable_through_word_problems(self) -> None:
        assert list(heldout_problems(12, seed=3)) == list(word_problems(12, seed=3, family="heldout"))
        assert list(heldout_problems(12, seed=3)) != list(heldout_problems(12, seed=4))

    def test_its_sentences_are_not_the_development_sets(self) -> None:
        dev = {p.question for p in word_problems(400, seed=1)}
        held = [p.question for p in heldout_problems(400, seed=1)]
        assert not dev.intersection(held)
        # The phrasing of the kind the issue names, absent from the development templates.
        assert any(" with " in q and " in each " in q and q.split()[1] == "buys" for q in held)

    def test_an_unknown_family_is_refused(self) -> None:
        with pytest.raises(ValueError, match="family"):
            list(word_problems(1, family="other"))
