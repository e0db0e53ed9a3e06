"""A seeded generator of arithmetic word problems with integer answers: the project's own development set.

The demo agent's calibration is fitted on these, never on a bank the project was given, so that a figure
measured on held-out problems of the same kind says how the agent generalises. The problems are the kind
the demo is built for (a few quantities, one to three operations, an integer answer) drawn from many
templates, each with several phrasings, names, objects and number ranges, so that no one sentence shape
and no one number dominates what a calibration sees:

* ``small``: one operation on small numbers (2 to 12), in short sentences;
* ``one_step``: one operation (``+``, ``-``, ``*`` or an exact ``/``) on numbers up to 120;
* ``two_step``: two operations, in every order the templates allow (``a * b - c``, ``(a + b) * c``, ...);
* ``three_step``: three operations (``a * b + c * d``, ``(a + b) * c - d``, ...).

Each task carries its stratum, the expression that solves it (for explaining a wrong accept) and its
gold answer. The same seed gives the same tasks on every machine (``random.Random`` is specified to).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from retryctl.evals._problem import WordProblem

__all__ = ["STRATA", "WordProblem", "word_problems"]

STRATA = ("small", "one_step", "two_step", "three_step")
"""The difficulty strata, by the number of operations the answer takes."""

_NAMES = ("Mia", "Ben", "Ana", "Leo", "Zoe", "Sam", "Ivy", "Omar", "Lena", "Raj", "Kim", "Tom", "Eva", "Noah")
_THINGS = (
    # (item, items, container, containers)
    ("crayon", "crayons", "box", "boxes"),
    ("pen", "pens", "pack", "packs"),
    ("apple", "apples", "bag", "bags"),
    ("egg", "eggs", "carton", "cartons"),
    ("marble", "marbles", "jar", "jars"),
    ("sticker", "stickers", "sheet", "sheets"),
    ("cookie", "cookies", "tray", "trays"),
    ("book", "books", "shelf", "shelves"),
    ("card", "cards", "deck", "decks"),
    ("flower", "flowers", "vase", "vases"),
    ("bottle", "bottles", "crate", "crates"),
    ("shell", "shells", "bucket", "buckets"),
)


@dataclass(frozen=True)
class _Words:
    name: str
    item: str
    items: str
    box: str
    boxes: str


# A template draws its numbers and returns (question, expression) or None when the numbers do not fit
# (a negative or non-integer answer); the generator then draws again.
_Template = Callable[[random.Random, _Words], "tuple[str, str] | None"]


def _n(rng: random.Random, low: int, high: int) -> int:
    return rng.randint(low, high)


def _small() -> list[_Template]:
    def add(r: random.Random, w: _Words) -> tuple[str, str]:
        a, b = _n(r, 2, 12), _n(r, 2, 12)
        q = r.choice(
            [
                f"{w.name} has {a} {w.items}. {w.name} gets {b} more. How many {w.items} does {w.name} have?",
                f"There are {a} red {w.items} and {b} blue {w.items}. How many {w.items} are there?",
            ]
        )
        return q, f"{a} + {b}"

    def sub(r: random.Random, w: _Words) -> tuple[str, str] | None:
        a, b = _n(r, 4, 12), _n(r, 2, 11)
        if b >= a:
            return None
        q = r.choice(
            [
                f"{w.name} has {a} {w.items} and loses {b}. How many {w.items} are left?",
                f"There are {a} {w.items}. {w.name} takes {b} of them. How many {w.items} are left?",
            ]
        )
        return q, f"{a} - {b}"

    def mul(r: random.Random, w: _Words) -> tuple[str, str]:
        a, b = _n(r, 2, 9), _n(r, 2, 9)
        q = r.choice(
            [
                f"Each {w.box} has {b} {w.items}. How many {w.items} are in {a} {w.boxes}?",
                f"There are {a} {w.boxes} with {b} {w.items} in each {w.box}. How many {w.items} are there?",
            ]
        )
        return q, f"{a} * {b}"

    return [add, sub, mul]


def _one_step() -> list[_Template]:
    def add(r: random.Random, w: _Words) -> tuple[str, str]:
        a, b = _n(r, 3, 60), _n(r, 2, 40)
        q = r.choice(
            [
                f"{w.name} has {a} {w.items}. {w.name} gets {b} more {w.items}. How many {w.items} does "
                f"{w.name} have now?",
                f"There are {a} {w.items} on a table and {b} {w.items} on a chair. How many {w.items} are "
                "there in all?",
            ]
        )
        return q, f"{a} + {b}"

    def sub(r: random.Random, w: _Words) -> tuple[str, str] | None:
        a, b = _n(r, 10, 90), _n(r, 2, 40)
        if b >= a:
            return None
        q = r.choice(
            [
                f"{w.name} had {a} {w.items} and gave away {b}. How many {w.items} are left?",
                f"A shop had {a} {w.items}. It sold {b} of them. How many {w.items} does the shop have now?",
            ]
        )
        return q, f"{a} - {b}"

    def mul(r: random.Random, w: _Words) -> tuple[str, str]:
        a, b = _n(r, 2, 25), _n(r, 2, 25)
        q = r.choice(
            [
                f"There are {a} {w.boxes} with {b} {w.items} in each {w.box}. How many {w.items} are there "
                "in all?",
                f"{w.name} buys {a} {w.boxes} of {w.items}. Each {w.box} has {b} {w.items}. How many "
                f"{w.items} does {w.name} buy?",
            ]
        )
        return q, f"{a} * {b}"

    def div(r: random.Random, w: _Words) -> tuple[str, str]:
        a, b = _n(r, 2, 12), _n(r, 2, 15)
        q = r.choice(
            [
                f"{w.name} shares {a * b} {w.items} equally among {a} friends. How many {w.items} does each "
                "friend get?",
                f"{a * b} {w.items} are packed equally into {a} {w.boxes}. How many {w.items} are in each "
                f"{w.box}?",
            ]
        )
        return q, f"{a * b} / {a}"

    return [add, sub, mul, div]


def _two_step() -> list[_Template]:
    def mul_sub(r: random.Random, w: _Words) -> tuple[str, str] | None:
        a, b, c = _n(r, 2, 20), _n(r, 2, 25), _n(r, 2, 30)
        if c >= a * b:
            return None
        q = r.choice(
            [
                f"{w.name} has {a} {w.boxes} of {b} {w.items}. {w.name} loses {c} {w.items}. How many "
                f"{w.items} does {w.name} have?",
                f"A shop has {a} {w.boxes} with {b} {w.items} in each {w.box}. It sells {c} {w.items}. "
                f"How many {w.items} are left?",
            ]
        )
        return q, f"{a} * {b} - {c}"

    def mul_add(r: random.Random, w: _Words) -> tuple[str, str]:
        a, b, c = _n(r, 2, 20), _n(r, 2, 25), _n(r, 2, 30)
        q = r.choice(
            [
                f"{w.name} has {a} {w.boxes} of {b} {w.items} and {c} loose {w.items}. How many {w.items} "
                f"does {w.name} have in all?",
                f"There are {a} {w.boxes} with {b} {w.items} each, and {c} more {w.items} on the floor. How "
                f"many {w.items} are there?",
            ]
        )
        return q, f"{a} * {b} + {c}"

    def add_sub(r: random.Random, w: _Words) -> tuple[str, str] | None:
        a, b, c = _n(r, 5, 60), _n(r, 2, 40), _n(r, 2, 40)
        if c >= a + b:
            return None
        q = r.choice(
            [
                f"{w.name} had {a} {w.items}, bought {b} more and then gave {c} to a friend. How many "
                f"{w.items} does {w.name} have now?",
                f"A class collects {a} {w.items} on Monday and {b} on Tuesday. They use {c} of them. How "
                f"many {w.items} are left?",
            ]
        )
        return q, f"{a} + {b} - {c}"

    def add_mul(r: random.Random, w: _Words) -> tuple[str, str]:
        a, b, c = _n(r, 2, 12), _n(r, 2, 12), _n(r, 2, 20)
        q = r.choice(
            [
                f"{w.name} buys {a} red {w.boxes} and {b} blue {w.boxes}. Each {w.box} holds {c} {w.items}. "
                f"How many {w.items} does {w.name} buy?",
                f"There are {a} {w.boxes} on one table and {b} {w.boxes} on another. Each {w.box} has {c} "
                f"{w.items}. How many {w.items} are there in all?",
            ]
        )
        return q, f"({a} + {b}) * {c}"

    def div_add(r: random.Random, w: _Words) -> tuple[str, str]:
        a, b, c = _n(r, 2, 10), _n(r, 2, 15), _n(r, 2, 20)
        q = (
            f"{a * b} {w.items} are shared equally among {a} {w.boxes}. Then {w.name} puts {c} more "
            f"{w.items} into one {w.box}. How many {w.items} are in that {w.box} now?"
        )
        return q, f"{a * b} / {a} + {c}"

    def sub_sub(r: random.Random, w: _Words) -> tuple[str, str] | None:
        a, b, c = _n(r, 20, 90), _n(r, 2, 30), _n(r, 2, 30)
        if b + c >= a:
            return None
        q = (
            f"{w.name} had {a} {w.items}. {w.name} gave {b} to a brother and {c} to a sister. How many "
            f"{w.items} does {w.name} have left?"
        )
        return q, f"{a} - {b} - {c}"

    return [mul_sub, mul_add, add_sub, add_mul, div_add, sub_sub]


def _three_step() -> list[_Template]:
    def two_products(r: random.Random, w: _Words) -> tuple[str, str]:
        a, b, c, d = _n(r, 2, 12), _n(r, 2, 15), _n(r, 2, 12), _n(r, 2, 15)
        q = (
            f"{w.name} buys {a} {w.boxes} of {b} {w.items} and {c} {w.boxes} of {d} {w.items}. How many "
            f"{w.items} does {w.name} buy in all?"
        )
        return q, f"{a} * {b} + {c} * {d}"

    def mul_sub_sub(r: random.Random, w: _Words) -> tuple[str, str] | None:
        a, b, c, d = _n(r, 2, 15), _n(r, 2, 20), _n(r, 2, 20), _n(r, 2, 20)
        if c + d >= a * b:
            return None
        q = (
            f"A shop has {a} {w.boxes} with {b} {w.items} in each. It sells {c} {w.items} in the morning "
            f"and {d} in the afternoon. How many {w.items} are left?"
        )
        return q, f"{a} * {b} - {c} - {d}"

    def add_mul_sub(r: random.Random, w: _Words) -> tuple[str, str] | None:
        a, b, c, d = _n(r, 2, 10), _n(r, 2, 10), _n(r, 2, 15), _n(r, 2, 30)
        if d >= (a + b) * c:
            return None
        q = (
            f"{w.name} has {a} {w.boxes} and buys {b} more. Each {w.box} holds {c} {w.items}. {w.name} "
            f"gives away {d} {w.items}. How many {w.items} does {w.name} have?"
        )
        return q, f"({a} + {b}) * {c} - {d}"

    def mul_add_add(r: random.Random, w: _Words) -> tuple[str, str]:
        a, b, c, d = _n(r, 2, 12), _n(r, 2, 15), _n(r, 2, 25), _n(r, 2, 25)
        q = (
            f"There are {a} {w.boxes} with {b} {w.items} each. {w.name} adds {c} {w.items} and a friend "
            f"adds {d} more. How many {w.items} are there now?"
        )
        return q, f"{a} * {b} + {c} + {d}"

    return [two_products, mul_sub_sub, add_mul_sub, mul_add_add]


_TEMPLATES: dict[str, list[_Template]] = {
    "small": _small(),
    "one_step": _one_step(),
    "two_step": _two_step(),
    "three_step": _three_step(),
}


def _value(expression: str) -> int | None:
    # The expressions are the generator's own (digits, + - * / and parentheses), never user input.
    value = eval(expression, {"__builtins__": {}}, {})
    return int(value) if float(value).is_integer() and value > 0 else None


def word_problems(
    count: int, *, seed: int = 0, strata: tuple[str, ...] = STRATA, family: str = "dev"
) -> Iterator[WordProblem]:
    """``count`` problems, the strata taking turns, each from a random template, phrasing and words.

    ``family="heldout"``: the held-out one-step family instead (:func:`~retryctl.evals.heldout_problems`,
    never fitted or tuned on; ``strata`` does not apply to it).
    """
    if family == "heldout":
        from retryctl.evals._heldout import heldout_problems

        yield from heldout_problems(count, seed=seed)
        return
    if family != "dev":
        raise ValueError(f"family={family!r}: must be 'dev' or 'heldout'")
    if count < 0:
        raise ValueError(f"count={count!r}: must be at least 0")
    unknown = [s for s in strata if s not in _TEMPLATES]
    if unknown or not strata:
        raise ValueError(f"strata={strata!r}: each must be one of {STRATA}")
    rng = random.Random(seed)
    made = 0
    while made < count:
        stratum = strata[made % len(strata)]
        item, items, box, boxes = rng.choice(_THINGS)
        words = _Words(rng.choice(_NAMES), item, items, box, boxes)
        drawn = rng.choice(_TEMPLATES[stratum])(rng, words)
        if drawn is None:
            continue
        question, expression = drawn
        gold = _value(expression)
        if gold is None:
            continue
        yield WordProblem(f"wp-{seed}-{made}", question, gold, stratum, expression)
        made += 1
