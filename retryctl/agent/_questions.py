"""The demo's built-in questions: one run of ``retryctl demo`` shows the whole range of verdicts.

Each was chosen by running it over 12 seeds (``python bench/demo_seeds.py --seeds 12``, docs/demo.md):
none of them is ever accepted wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEMO_QUESTIONS", "DemoQuestion"]


@dataclass(frozen=True)
class DemoQuestion:
    """One built-in question, with its answer and what it shows."""

    question: str
    gold: str
    """The right answer (for checking the question over seeds; the demo never reads it)."""
    shows: str
    """What a newcomer should see in its run."""


DEMO_QUESTIONS: tuple[DemoQuestion, ...] = (
    DemoQuestion(
        question="There are 9 vases with 6 flowers in each vase. How many flowers are there?",
        gold="54",
        shows="an accept on evidence: the model's own answers disagree, so the controller switches to "
        "the calculator, whose expressions (held by the grammar to 9 and 6) agree",
    ),
    DemoQuestion(
        question="Omar had 66 pens. He gave away 18 pens. How many pens does Omar have now?",
        gold="48",
        shows="a refine: the expressions agree on 18 - 66, and the count check refuses -48 pens; the "
        "grammar is relaxed and the model is told why",
    ),
    DemoQuestion(
        question="Ivy buys 3 packs of 14 cards and 5 single cards, then splits them equally among 4 "
        "friends and keeps the rest. How many cards does each friend get?",
        gold="11",
        shows="an honest abstention: no translation the model finds holds up, and the controller "
        "stops rather than guess",
    ),
)
"""The tour ``retryctl demo`` runs when it is given no question, in order."""
