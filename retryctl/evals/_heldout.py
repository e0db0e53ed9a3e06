"""A second family of one-step word problems, held out: the project never fits or tunes on it.

The development set (:func:`~retryctl.evals.word_problems`) fits the shipped calibration (seed 1) and
is where the checks were read (seed 2); a figure on its seed 3 is held out by task but not by
*phrasing*: the same templates wrote it. This family is held out by phrasing too: other sentence
shapes ("Li buys 2 boxes with 9 pens in each box"), other names, other objects and units, the
question sometimes first, and one operation each (``+``, ``-``, ``*`` or an exact ``/``). It is used
only to report figures (``bench/graded_eval.py``); nothing in the project is fitted, tuned or read
on it, and a change made because of a figure on it would spend it. Its stratum is ``heldout``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from retryctl.evals._problem import WordProblem

__all__ = ["HELDOUT_STRATUM", "heldout_problems"]

HELDOUT_STRATUM = "heldout"
"""The stratum every problem of this family carries."""

_NAMES = ("Li", "Ava", "Juan", "Priya", "Kofi", "Hana", "Marek", "Sofia", "Tariq", "Elif", "Yuki", "Owen")
_GOODS = (
    # (item, items, holder, holders)
    ("pencil", "pencils", "box", "boxes"),
    ("pen", "pens", "box", "boxes"),
    ("orange", "oranges", "basket", "baskets"),
    ("stamp", "stamps", "album", "albums"),
    ("bead", "beads", "string", "strings"),
    ("ticket", "tickets", "booklet", "booklets"),
    ("muffin", "muffins", "tin", "tins"),
    ("toy car", "toy cars", "case", "cases"),
    ("seed", "seeds", "packet", "packets"),
    ("coin", "coins", "purse", "purses"),
)

_Template = Callable[[random.Random, str, tuple[str, str, str, str]], "tuple[str, str] | None"]


def _add(r: random.Random, who: str, g: tuple[str, str, str, str]) -> tuple[str, str]:
    item, items, _, _ = g
    a, b = r.randint(2, 80), r.randint(2, 60)
    q = r.choice(
        [
            f"{who} picked {a} {items} in the morning and {b} {items} in the afternoon. How many "
            f"{items} did {who} pick that day?",
            f"How many {items} are there altogether if one shelf holds {a} {items} and another holds {b}?",
            f"A {item} collector owned {a} {items}. A cousin sent {b} more. What is the total now?",
        ]
    )
    return q, f"{a} + {b}"


def _sub(r: random.Random, who: str, g: tuple[str, str, str, str]) -> tuple[str, str] | None:
    _, items, _, _ = g
    a, b = r.randint(8, 99), r.randint(2, 60)
    if b >= a:
        return None
    q = r.choice(
        [
            f"{who} started the week with {a} {items} and used {b} of them. How many remain?",
            f"How many {items} does {who} still need if the goal is {a} {items} and {who} has {b}?",
            f"Out of {a} {items}, {b} were broken. How many {items} were not broken?",
        ]
    )
    return q, f"{a} - {b}"


def _mul(r: random.Random, who: str, g: tuple[str, str, str, str]) -> tuple[str, str]:
    _, items, holder, holders = g
    a, b = r.randint(2, 15), r.randint(2, 15)
    q = r.choice(
        [
            f"{who} buys {a} {holders} with {b} {items} in each {holder}. How many {items} is that?",
            f"What is the number of {items} in {a} {holders} if every {holder} contains {b}?",
            f"Every day {who} makes {b} {items}. How many {items} does {who} make in {a} days?",
        ]
    )
    return q, f"{a} * {b}"


def _div(r: random.Random, who: str, g: tuple[str, str, str, str]) -> tuple[str, str]:
    _, items, _, holders = g
    a, b = r.randint(2, 12), r.randint(2, 12)
    q = r.choice(
        [
            f"{who} splits {a * b} {items} evenly into {a} {holders}. How many {items} go in each?",
            f"If {a * b} {items} are handed out equally to {a} children, how many does each child get?",
            f"{a} friends share a prize of {a * b} {items} fairly. What is each friend's share?",
        ]
    )
    return q, f"{a * b} / {a}"


_TEMPLATES: tuple[_Template, ...] = (_add, _sub, _mul, _div)


def heldout_problems(count: int, *, seed: int = 0) -> Iterator[WordProblem]:
    """``count`` one-step problems of the held-out family, the four operations taking turns; ids
    ``ho-<seed>-<i>``. The same seed gives the same problems on every machine."""
    if count < 0:
        raise ValueError(f"count={count!r}: must be at least 0")
    rng = random.Random(seed)
    made = 0
    while made < count:
        template = _TEMPLATES[made % len(_TEMPLATES)]
        drawn = template(rng, rng.choice(_NAMES), rng.choice(_GOODS))
        if drawn is None:
            continue
        question, expression = drawn
        # The family's own expressions: two integers and one operator, never user input.
        gold = eval(expression, {"__builtins__": {}}, {})
        yield WordProblem(f"ho-{seed}-{made}", question, int(gold), HELDOUT_STRATUM, expression)
        made += 1
