"""The numbers check compiled into grammars: a ladder the expression members decode under.

The check (:func:`~retryctl.agent._members.ungrounded_numbers`, ``unused_numbers`` and
``repeated_numbers``) refuses an expression after the fact; SmolLM2-135M then copies its example's
shape (``5 * 3 - 2``) again and again, and the step abstains. Written as a grammar, the same check
constrains decoding instead: the model can only write the question's numbers, each as often as the
question gives it (plus the constants its words imply, :data:`UNIT_CONSTANTS`, any number of
times), joined by ``+ - * /`` with parentheses. The ladder, narrow to wide:

* ``permutations`` (strictness 1.0): exactly what the checks accept, in the canonical spacing
  (``7 * (8 - 5)``: one space around each operator, none inside parentheses, numbers as the
  question's values), joined by the operations the question's words invite (:mod:`._operators`);
* ``any-operator`` (0.8): the same numbers, any of ``+ - * /``: the operations check, the one that
  reads words and so the likeliest to be wrong, relaxes first, and the check relaxes with the rung
  (:data:`OPERATOR_CHECK_BELOW`), so that every expression this rung admits is one the checks accept;
* ``numbers`` (0.64): the question's numbers and constants, any number of times each (the top rung
  when a question has more than :data:`MAX_PERMUTED` numbers; below it, a filter only: the numbers
  check still refuses a number used twice);
* ``expression`` (0.5): any digits and operators (``EXPRESSION_FORMAT``'s schema).

The check still runs on every output: a grammar is a filter, never a proof (a relaxed rung lets a
refused expression through to be refused again). Measured (SmolLM2-135M, 8 samples at T 0.7, the
development set ``word_problems(n, seed=11)``): under ``permutations`` the expressions' majority is
right on 0.45–0.6 of the problems with the one-shot prompt (a prototype, 40 problems); on 14
problems, 0.43 with the six-shot prompt the demo ships, precision 1.0 where 7 or more of 8 agree
(one-shot: 0.36 and 0.50; docs/evals.md, ``bench/agent_prompts.py``).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections import Counter
from collections.abc import Sequence

from retryctl.agent._operators import OPERATIONS, invited_operators
from retryctl.agent._prompts import EXPRESSION_FORMAT
from retryctl.agent._reading import UNIT_CONSTANTS, _implied, _numbers, _users_words, _words_of
from retryctl.models import Grammar, Message, rung_for

__all__ = ["MAX_PERMUTED", "OPERATOR_CHECK_BELOW", "expression_ladder", "grammar_for", "question_terms"]

OPERATOR_CHECK_BELOW = 0.8
"""At this strictness and below, an expression member is no longer held to the operations the
question's words invite (:mod:`._operators`): the ``any-operator`` rung and the check relax together."""

MAX_PERMUTED = 5
"""The most numbers (counted as often as given) the ``permutations`` rung is built for: its size
grows as 3^n (one alternative per sub-multiset and split) and llama.cpp follows every split a
parenthesis may open (five numbers under three parentheses: ~10^5 parse stacks); past this the ladder
starts at ``numbers``."""


def _op_rule(ops: Sequence[str]) -> str:
    """The ``op`` rule: the operators the question invites (:mod:`._operators`), one space around each."""
    return "op ::= " + " | ".join(_literal(f" {op} ") for op in ops)


def question_terms(messages: Sequence[Message]) -> tuple[list[str], list[str]] | None:
    """The question's numbers (sorted, as often as given) and the constants it implies (0 and 1
    always, UNIT_CONSTANTS by their words), both as written values; ``None`` without a user message."""
    question = next((m for m in messages if m.get("role") == "user"), None)
    if question is None:
        return None
    text = _users_words(question)
    words = _words_of(text)
    constants = [n for n in UNIT_CONSTANTS if _implied(n, words)]
    return sorted(_numbers(text), key=_order), constants


def _order(number: str) -> tuple[float, str]:
    return float(number), number


def _literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    return json.dumps(text)  # GBNF literals take JSON's escapes for quote and backslash


def _envelope(body: str) -> str:
    # {"expression": "<body>"}, as json.dumps writes it and the prompt's examples show it.
    return f'root ::= "{{\\"expression\\": \\"" {body} "\\"}}"'


def _key(kind: str, numbers: tuple[str, ...]) -> str:
    # GBNF rule names take letters, digits and dashes.
    return kind + "-" + "-".join(n.replace(".", "d") for n in numbers) if numbers else kind + "-none"


def permutations_gbnf(
    numbers: Sequence[str], constants: Sequence[str], ops: Sequence[str] = OPERATIONS
) -> str:
    """Expressions using each of ``numbers`` exactly as often as listed and ``constants`` any number
    of times, joined by the operators ``ops`` with parentheses (any nesting, redundant ones too).

    ``e(M)`` is an expression whose required numbers are the multiset ``M``: a term ``t(A)`` for a
    sub-multiset ``A`` (possibly empty: a constant, or all of ``M``), an operator, then ``e(M - A)``;
    or the term ``t(M)`` alone. ``t(M)`` is a number when ``M`` is one, a constant when it is empty,
    or a parenthesised ``e(M)``. Right recursion only: llama.cpp's GBNF takes no left recursion.
    """
    rules: dict[str, str] = {}
    consts = " | ".join(_literal(c) for c in constants)

    def subs(ms: tuple[str, ...]) -> list[tuple[str, ...]]:
        counts = Counter(ms)
        items = sorted(counts, key=_order)
        return [
            tuple(x for item, k in zip(items, ks, strict=True) for x in [item] * k)
            for ks in itertools.product(*(range(counts[i] + 1) for i in items))
        ]

    def rest(ms: tuple[str, ...], part: tuple[str, ...]) -> tuple[str, ...]:
        left = list(ms)
        for x in part:
            left.remove(x)
        return tuple(left)

    def expr(ms: tuple[str, ...]) -> str:
        key = _key("e", ms)
        if key not in rules:
            rules[key] = ""  # reserved: the recursion below may come back to it
            alts = [term(ms)]
            for part in subs(ms):
                # An empty part is a constant term, and all of M in the term leaves constants to
                # follow: both only when there are constants.
                if consts or (part and part != ms):
                    alts.append(f"{term(part)} op {expr(rest(ms, part))}")
            rules[key] = " | ".join(dict.fromkeys(alts))
        return key

    def term(ms: tuple[str, ...]) -> str:
        key = _key("t", ms)
        if key not in rules:
            rules[key] = ""
            alts = [f'"(" {expr(ms)} ")"']
            if len(ms) == 1:
                alts.insert(0, _literal(ms[0]))
            elif not ms:
                alts.insert(0, consts)
            rules[key] = " | ".join(alts)
        return key

    top = expr(tuple(numbers))
    return "\n".join([_envelope(top), _op_rule(ops), *(f"{k} ::= {v}" for k, v in rules.items())])


def numbers_gbnf(numbers: Sequence[str], constants: Sequence[str], ops: Sequence[str] = OPERATIONS) -> str:
    """Expressions of ``numbers`` and ``constants``, each any number of times, joined by the
    operators ``ops`` with parentheses."""
    values = " | ".join(_literal(n) for n in dict.fromkeys([*numbers, *constants]))
    return "\n".join(
        [
            _envelope("expr"),
            _op_rule(ops),
            "expr ::= term (op term)*",
            'term ::= num | "(" expr ")"',
            f"num ::= {values}",
        ]
    )


def expression_ladder(messages: Sequence[Message]) -> list[Grammar]:
    """The ladder for the question in ``messages`` (its first user message, without the check's own
    findings quoted back by a refine round): ``permutations``, ``numbers``, ``expression``, each rung
    a :class:`~retryctl.models.Grammar` with its strictness. Without a user message, or a question
    with no numbers, only ``expression``; with more than :data:`MAX_PERMUTED` numbers, no
    ``permutations``."""
    question = next((m for m in messages if m.get("role") == "user"), None)
    return list(_ladder(None if question is None else _users_words(question)))


@functools.lru_cache(maxsize=64)
def _ladder(text: str | None) -> tuple[Grammar, ...]:
    # Each draw and each candidate's notes ask for the ladder of the same question: build it once.
    schema = EXPRESSION_FORMAT["json_schema"]["schema"]
    wide = Grammar(
        name="expression", json_schema=schema, strictness=0.5, description="any digits joined by + - * /"
    )
    terms = None if text is None else question_terms([{"role": "user", "content": text}])
    if terms is None or not terms[0]:
        return (wide,)
    numbers, constants = terms
    ops = invited_operators(text or "")
    shown = ", ".join(numbers)
    extra = f" (and {', '.join(constants)} any number of times)" if constants else ""
    joined = " ".join(ops)
    every = " ".join(OPERATIONS)
    ladder = []
    if len(numbers) <= MAX_PERMUTED:
        ladder.append(
            Grammar(
                name="permutations",
                gbnf=permutations_gbnf(numbers, constants, ops),
                strictness=1.0,
                description=f"{shown}, each as often as given{extra}, joined by {joined}",
            )
        )
        if tuple(ops) != OPERATIONS:
            # The operations check is the one that reads words, so it is the first to relax: the
            # same numbers, any operator (and the check stops asking for invited ones with it).
            ladder.append(
                Grammar(
                    name="any-operator",
                    gbnf=permutations_gbnf(numbers, constants, OPERATIONS),
                    strictness=OPERATOR_CHECK_BELOW,
                    description=f"{shown}, each as often as given{extra}, joined by {every}",
                )
            )
    ladder.append(
        Grammar(
            name="numbers",
            gbnf=numbers_gbnf(numbers, constants, OPERATIONS),
            strictness=0.64,
            description=(
                f"{', '.join(dict.fromkeys(numbers))}{extra}, any number of times, joined by {every}"
            ),
        )
    )
    return (*ladder, wide)


def grammar_for(messages: Sequence[Message], strictness: float) -> Grammar | None:
    """The rung of :func:`expression_ladder` used at ``strictness`` (``None`` below every rung)."""
    return rung_for(expression_ladder(messages), strictness)
