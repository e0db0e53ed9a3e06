"""The members of the demo's equivalence group, each a :class:`~retryctl.models.ModelBackend`.

:class:`AnswerBackend` is the model answering in its own words. :class:`ToolBackend` is a tool of the
registry's group driven by the same model: the model writes an arithmetic expression under the
numbers check compiled into a grammar (:mod:`._grammars`, the rung of the step's strictness) and the
tool evaluates it, so each candidate's answer is computed exactly and
its agreement measures whether the model *translated* the problem consistently. Because every member
is a backend, a ``switch`` verdict of the controlled step moves from the model to a tool, and from one
tool to the next, with no routing of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from retryctl.agent._counts import with_count_finding
from retryctl.agent._grammars import OPERATOR_CHECK_BELOW, expression_ladder, grammar_for
from retryctl.agent._operators import uninvited_operators
from retryctl.agent._prompts import (
    EXPRESSION_FORMAT,
    EXPRESSION_PATTERN,
    NO_ANSWER,
    answer_prompt,
    demo_equivalence,
    expression_prompt,
    parse_expression,
)
from retryctl.agent._reading import (
    _FINDING,
    UNIT_CONSTANTS,
    _implied,
    _numbers,
    _users_words,
    _words_of,
)
from retryctl.controller import ValidatorResult, normalise_number
from retryctl.exceptions import ConfigError
from retryctl.models import (
    Candidate,
    Grammar,
    Message,
    MessagesLike,
    ModelBackend,
    SamplingParams,
    normalise_messages,
    sample_blocking,
)

__all__ = [
    "EXPRESSION_TOOLS",
    "NUMBERS_CHECK",
    "UNIT_CONSTANTS",
    "AnswerBackend",
    "ExpressionTool",
    "ToolBackend",
    "numbers_from_question",
    "repeated_numbers",
    "ungrounded_numbers",
]

NUMBERS_CHECK = "numbers_from_question"
"""The name of the check that an expression uses the question's numbers, all of them, each as often as
the question writes it, and no others (UNIT_CONSTANTS aside)."""


def ungrounded_numbers(expression: str, messages: list[Message]) -> list[str]:
    """The numbers of ``expression`` that the user's messages neither give nor imply (:data:`UNIT_CONSTANTS`).

    An expression that translates the problem uses the problem's numbers; one that invents ``50000``
    for "What is the capital of France?" evaluates exactly and agrees with itself, and is still wrong.
    Numbers compare as written values (``2.50`` is ``2.5``, ``1,200`` is ``1200``); each is listed once.
    """
    text = " ".join(_users_words(m) for m in messages if m.get("role") == "user")
    said = set(_numbers(text))
    words = _words_of(text)
    return list(dict.fromkeys(n for n in _numbers(expression) if n not in said and not _implied(n, words)))


def repeated_numbers(expression: str, messages: list[Message]) -> list[str]:
    """The numbers of the question that ``expression`` uses more often than the question writes them.

    "Eva has 11 apples and loses 10" is not ``11 * 10 - 10``: a translation uses each quantity as
    often as the problem gives it. A number the question's words also imply (2 for "half", 12 for
    "dozen": :data:`UNIT_CONSTANTS`) may be used again. A problem that needs a quantity twice ("Ann
    has 5 apples and Bob twice as many: how many in all?" is ``5 + 5 * 2``) is refused: the check
    trades those for never accepting a number counted twice, as the leave-out check trades problems
    with a number that plays no part. Measured on the development set: docs/evals.md.
    """
    question = next((m for m in messages if m.get("role") == "user"), None)
    if question is None:
        return []
    text = _users_words(question)
    given = Counter(_numbers(text))
    words = _words_of(text)
    used = Counter(_numbers(expression))
    return [n for n, k in used.items() if n in given and k > given[n] and not _implied(n, words)]


def unused_numbers(expression: str, messages: list[Message]) -> list[str]:
    """The numbers of the question (the first user message) that ``expression`` does not use, as
    often as the question writes them (``7`` in "2 decks of 7 and 9 decks of 7" is needed twice).

    A translation of an arithmetic word problem uses every number the problem gives: ``5 * 3 - 2`` for
    "7 boxes of 8 crayons, she loses 5" copies the prompt's example, evaluates exactly, agrees with
    itself, and is wrong. (A problem with a number that plays no part, such as a year, is refused
    too: the check trades those for never accepting a copied or half-read translation.)
    """
    question = next((m for m in messages if m.get("role") == "user"), None)
    if question is None:
        return []
    used = Counter(_numbers(expression))
    given = Counter(_numbers(_users_words(question)))
    return [n for n, k in given.items() if used[n] < k]


def _listed(numbers: list[str]) -> str:
    return numbers[0] if len(numbers) == 1 else f"{', '.join(numbers[:-1])} and {numbers[-1]}"


def _finding(
    expression: str,
    invented: Sequence[str],
    left_out: Sequence[str] = (),
    repeated: Sequence[str] = (),
    operators: Sequence[str] = (),
) -> str:
    """The check's evidence: ``the expression '5 * 3 - 2' uses 3 and 2, which are not in the
    question; it also leaves out 7 and 8, which the question gives`` (each part alone when only it
    applies; ``uses 10 more often than the question gives it`` for a number counted twice)."""
    parts = []
    if invented:
        verb = "is" if len(invented) == 1 else "are"
        parts.append(f"uses {_listed(list(invented))}, which {verb} not in the question")
    if repeated:
        pronoun = "it" if len(repeated) == 1 else "them"
        parts.append(f"uses {_listed(list(repeated))} more often than the question gives {pronoun}")
    if left_out:
        parts.append(f"leaves out {_listed(list(left_out))}, which the question gives")
    if operators:
        parts.append(f"uses {_listed(list(operators))}, which no word of the question asks for")
    return f"the expression {expression!r} {'; it also '.join(parts)}"


def numbers_from_question(text: str) -> ValidatorResult:
    """The validator of the demo step: fails a candidate whose expression uses a number the question
    does not give, with the evidence naming the number.

    The numbers are compared where the question is known, in :meth:`ToolBackend.evaluate`, which
    refuses such an expression and writes the finding as the candidate's text; this validator hands
    that finding to the controller, so that its ``refine`` feedback names the check and the number
    instead of calling the refused candidates inconsistent. Any other text passes (an answer in the
    model's own words has no expression to check).
    """
    finding = text[len(NO_ANSWER) :] if text.startswith(NO_ANSWER) else ""
    if _FINDING.fullmatch(finding):
        return ValidatorResult(NUMBERS_CHECK, False, finding)
    return ValidatorResult(NUMBERS_CHECK, True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExpressionTool:
    """How one tool takes an arithmetic expression and how its answer is read back."""

    to_args: Callable[[str], dict[str, Any]]
    """The tool's arguments for an expression."""
    read: Callable[[ToolMessage], str | None]
    """The value in the tool's message, ``None`` when it has none."""


def _read_calculator(message: ToolMessage) -> str | None:
    # "51", or "1/3 (≈ 0.333333333333)" for a value whose decimal does not terminate.
    return str(message.content).split(" (", 1)[0].strip() or None


def _read_python(message: ToolMessage) -> str | None:
    report = message.artifact
    result = getattr(report, "result", None)
    if result is None or result.exit_code != 0 or result.timed_out:
        return None
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else None


EXPRESSION_TOOLS: dict[str, ExpressionTool] = {
    "calculator": ExpressionTool(to_args=lambda e: {"expression": e}, read=_read_calculator),
    "python": ExpressionTool(to_args=lambda e: {"code": f"print({e})"}, read=_read_python),
}
"""The built-in tools of the ``arithmetic`` group, by key."""


class AnswerBackend:
    """The model answering in its own words, shown the ``The answer is N.`` format first.

    ``max_tokens`` caps each answer (the step's schedule may allow more for the tools' JSON).
    """

    def __init__(self, model: ModelBackend, *, max_tokens: int = 16) -> None:
        self.model = model
        self.max_tokens = max_tokens

    @property
    def name(self) -> str:
        """The wrapped model's name."""
        return self.model.name

    def _params(self, params: SamplingParams | None) -> SamplingParams:
        base = params or SamplingParams()
        return dataclasses.replace(base, max_tokens=min(base.max_tokens, self.max_tokens))

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """``k`` answers of the model (a negative or fractional count's text says so: :mod:`._counts`)."""
        asked = normalise_messages(messages)
        drawn = await self.model.sample(answer_prompt(asked), self._params(params), k=k)
        return [_counted(c, asked, demo_equivalence(c.text)) for c in drawn]

    def sample_sync(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """Blocking twin of :meth:`sample`."""
        asked = normalise_messages(messages)
        drawn = sample_blocking(self.model, answer_prompt(asked), self._params(params), k=k)
        return [_counted(c, asked, demo_equivalence(c.text)) for c in drawn]


def _counted(candidate: Candidate, messages: list[Message], answer: str | None) -> Candidate:
    """``candidate`` with the count check's finding in its text when its answer is no count of the
    things the question asks "how many" of (read back by :func:`~._counts.whole_counts`)."""
    question = next((m for m in messages if m.get("role") == "user"), None)
    if question is None:
        return candidate
    text = with_count_finding(candidate.text, _users_words(question), answer)
    return candidate if text == candidate.text else dataclasses.replace(candidate, text=text)


_ARITHMETIC_RUN = re.compile(r"[0-9(][0-9+*/() .-]*")


def _arithmetic_part(expression: str) -> str:
    """``expression`` if it is only arithmetic, else its longest run of arithmetic with an operator.

    A grammar holds the embedded model (and a server honouring the schema) to digits and operators;
    a server that takes the schema only in the prompt lets the model write ``"Mia has 7 * 8 - 5"``,
    whose arithmetic is the translation, the words around it are not.
    """
    if re.fullmatch(EXPRESSION_PATTERN, expression):
        return expression
    runs = [run.strip().rstrip("+-*/.( ") for run in _ARITHMETIC_RUN.findall(expression)]
    runs = [run for run in runs if any(op in run for op in "+-*/")]
    return max(runs, key=len) if runs else expression


def _chosen(drawn: Candidate, expression: str, messages: list[Message] | None) -> tuple[str, ...]:
    """What the grammar allowed and what the model chose, for the candidate's notes."""
    if drawn.grammar is None or messages is None:
        return ()
    rung = next((g for g in expression_ladder(messages) if g.name == drawn.grammar), None)
    allowed = rung.description if rung is not None and rung.description else drawn.grammar
    return (f"grammar {drawn.grammar!r} allowed {allowed}; the model chose {expression}",)


class ToolBackend:
    """A tool answering through the model: ``k`` expressions drawn under the grammar, each evaluated.

    A candidate's text is ``"<expression> = <value>"`` and its answer the exact value; its logprobs are
    those of the expression's tokens, so token confidence still measures the model's certainty. An
    expression the tool refuses gives a candidate with no answer (it agrees with nothing) whose text
    says why. ``temperature`` replaces the step's when set; by default the step's is used, so that
    the translations can differ: drawn near-greedy, three expressions are one translation printed
    three times, and the controller counts them as one vote (:class:`~retryctl.controller.Repeats`).
    """

    def __init__(
        self,
        model: ModelBackend,
        tool: BaseTool,
        *,
        adapter: ExpressionTool | None = None,
        temperature: float | None = None,
    ) -> None:
        found = adapter or EXPRESSION_TOOLS.get(tool.name)
        if found is None:
            raise ConfigError(
                field="adapter",
                value=tool.name,
                problem=f"no built-in adapter for this tool; known: {sorted(EXPRESSION_TOOLS)}",
            )
        self.model = model
        self.tool = tool
        self.adapter = found
        self.temperature = temperature

    @property
    def name(self) -> str:
        """The tool's key: what decision logs and ``switch`` verdicts name."""
        return self.tool.name

    def grammar_at(self, messages: MessagesLike, strictness: float) -> Grammar | None:
        """The grammar this member decodes under at ``strictness``: the rung of the question's ladder
        (:func:`~retryctl.agent._grammars.expression_ladder`), ``None`` below every rung (then only
        ``EXPRESSION_FORMAT`` shapes the output, and the check runs after decoding as always)."""
        return grammar_for(normalise_messages(messages), strictness)

    def _params(self, params: SamplingParams | None, asked: list[Message]) -> SamplingParams:
        base = params or SamplingParams()
        temperature = base.temperature if self.temperature is None else self.temperature
        return dataclasses.replace(
            base,
            response_format=EXPRESSION_FORMAT,
            temperature=temperature,
            grammar=self.grammar_at(asked, base.strictness),
        )

    def evaluate(
        self, drawn: Candidate, messages: list[Message] | None = None, strictness: float = 1.0
    ) -> Candidate:
        """The tool's answer to one drawn expression, as a candidate. With ``messages``, an expression
        using numbers the user never gave (see :func:`ungrounded_numbers`) is refused unevaluated."""
        try:
            expression = _arithmetic_part(parse_expression(drawn.text))
        except ValueError as exc:
            return dataclasses.replace(drawn, text=f"{NO_ANSWER}{exc}", answer=None)
        invented = ungrounded_numbers(expression, messages) if messages is not None else []
        left_out = unused_numbers(expression, messages) if messages is not None else []
        repeated = repeated_numbers(expression, messages) if messages is not None else []
        # The operations check relaxes with the ladder's ``any-operator`` rung (strictness 0.8).
        held = messages is not None and strictness > OPERATOR_CHECK_BELOW
        operators = uninvited_operators(expression, messages) if held and messages else []
        if invented or left_out or repeated or operators:
            # Read back by numbers_from_question.
            why = _finding(expression, invented, left_out, repeated, operators)
            return dataclasses.replace(drawn, text=f"{NO_ANSWER}{why}", answer=None)
        call = {
            "name": self.tool.name,
            "args": self.adapter.to_args(expression),
            "id": f"call-{uuid.uuid4().hex[:12]}",
            "type": "tool_call",
        }
        message = self.tool.invoke(call)
        value = self.adapter.read(message) if isinstance(message, ToolMessage) else None
        if value is None or (isinstance(message, ToolMessage) and message.status == "error"):
            shown = str(getattr(message, "content", message)).strip().splitlines()
            why = shown[0] if shown else "no output"
            return dataclasses.replace(
                drawn, text=f"{NO_ANSWER}{self.tool.name} refused {expression!r}: {why}", answer=None
            )
        notes = (
            *drawn.notes,
            *_chosen(drawn, expression, messages),
            f"{expression} evaluated by {self.tool.name}",
        )
        answer = normalise_number(value)
        evaluated = dataclasses.replace(drawn, text=f"{expression} = {value}", answer=answer, notes=notes)
        return evaluated if messages is None else _counted(evaluated, messages, answer)

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """``k`` expressions of the model, each evaluated by the tool."""
        asked = normalise_messages(messages)
        drawn = await self.model.sample(expression_prompt(asked), self._params(params, asked), k=k)
        # The tool runs in a thread (the python tool in a sandbox), inside the draw its driver awaits.
        held = (params or SamplingParams()).strictness
        return [self._at_temperature(await asyncio.to_thread(self.evaluate, c, asked, held)) for c in drawn]

    def sample_sync(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """Blocking twin of :meth:`sample`."""
        asked = normalise_messages(messages)
        drawn = sample_blocking(self.model, expression_prompt(asked), self._params(params, asked), k=k)
        held = (params or SamplingParams()).strictness
        return [self._at_temperature(self.evaluate(c, asked, held)) for c in drawn]

    def _at_temperature(self, candidate: Candidate) -> Candidate:
        # The controller tells a repeat from new evidence by the temperature a candidate was drawn at.
        if self.temperature is None:
            return candidate
        return dataclasses.replace(candidate, temperature=self.temperature)
