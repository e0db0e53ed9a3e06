"""The members of the demo's equivalence group, each a :class:`~retryctl.models.ModelBackend`.

:class:`AnswerBackend` is the model answering in its own words. :class:`ToolBackend` is a tool of the
registry's group driven by the same model: the model writes an arithmetic expression under a
JSON-schema grammar and the tool evaluates it, so each candidate's answer is computed exactly and
its agreement measures whether the model *translated* the problem consistently. Because every member
is a backend, a ``switch`` verdict of the controlled step moves from the model to a tool, and from one
tool to the next, with no routing of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import uuid
from collections.abc import Callable
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from retryctl._turn import yielded_turn
from retryctl.agent._prompts import (
    EXPRESSION_FORMAT,
    EXPRESSION_PATTERN,
    NO_ANSWER,
    answer_prompt,
    expression_prompt,
    parse_expression,
)
from retryctl.controller import ValidatorResult, normalise_number
from retryctl.exceptions import ConfigError
from retryctl.models import (
    Candidate,
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
    "ungrounded_numbers",
]

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
UNIT_CONSTANTS = frozenset({*(str(n) for n in range(13)), "24", "60", "100", "1000"})
"""Numbers an expression may use without the question saying them: the counts 0 to 12 (halving,
doubling, a dozen, days of a week...) and the unit factors 24, 60, 100 and 1000."""

NUMBERS_CHECK = "numbers_from_question"
"""The name of the check that an expression uses only the question's numbers (and UNIT_CONSTANTS)."""

# The check's finding, as the candidate's text and the refine feedback quote it. Its own numbers are
# not the user's: a refine round that quotes "uses 2" must not make 2 a number of the question.
_FINDING = re.compile(
    r"""the expression (?:'[^']*'|"[^"]*") uses [0-9., and]+?, which (?:is|are) not in the question"""
)


def _canonical(number: str) -> str:
    return number.rstrip("0").rstrip(".") if "." in number else number


def ungrounded_numbers(expression: str, messages: list[Message]) -> list[str]:
    """The numbers of ``expression`` that neither the user's messages nor :data:`UNIT_CONSTANTS` contain.

    An expression that translates the problem uses the problem's numbers; one that invents ``50000``
    for "What is the capital of France?" evaluates exactly and agrees with itself, and is still wrong.
    Numbers compare as written values (``2.50`` is ``2.5``, ``1,200`` is ``1200``); each is listed once.
    """
    said = {
        _canonical(n)
        for m in messages
        if m.get("role") == "user"
        for n in _NUMBER.findall(_FINDING.sub("", str(m.get("content") or "")).replace(",", ""))
    }
    used = [_canonical(n) for n in _NUMBER.findall(expression)]
    return list(dict.fromkeys(n for n in used if n not in said and n not in UNIT_CONSTANTS))


def _finding(expression: str, invented: list[str]) -> str:
    """The check's evidence: ``the expression '7 * 8 - 2' uses 2, which is not in the question``."""
    listed = invented[0] if len(invented) == 1 else f"{', '.join(invented[:-1])} and {invented[-1]}"
    verb = "is" if len(invented) == 1 else "are"
    return f"the expression {expression!r} uses {listed}, which {verb} not in the question"


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
        """``k`` answers of the model."""
        return await self.model.sample(answer_prompt(normalise_messages(messages)), self._params(params), k=k)

    def sample_sync(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """Blocking twin of :meth:`sample`."""
        return sample_blocking(
            self.model, answer_prompt(normalise_messages(messages)), self._params(params), k=k
        )


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


class ToolBackend:
    """A tool answering through the model: ``k`` expressions drawn under the grammar, each evaluated.

    A candidate's text is ``"<expression> = <value>"`` and its answer the exact value; its logprobs are
    those of the expression's tokens, so token confidence still measures the model's certainty. An
    expression the tool refuses gives a candidate with no answer (it agrees with nothing) whose text
    says why. ``temperature`` replaces the step's: an expression is a translation, drawn near-greedy.
    """

    def __init__(
        self,
        model: ModelBackend,
        tool: BaseTool,
        *,
        adapter: ExpressionTool | None = None,
        temperature: float | None = 0.2,
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

    def _params(self, params: SamplingParams | None) -> SamplingParams:
        base = params or SamplingParams()
        temperature = base.temperature if self.temperature is None else self.temperature
        return dataclasses.replace(base, response_format=EXPRESSION_FORMAT, temperature=temperature)

    def evaluate(self, drawn: Candidate, messages: list[Message] | None = None) -> Candidate:
        """The tool's answer to one drawn expression, as a candidate. With ``messages``, an expression
        using numbers the user never gave (see :func:`ungrounded_numbers`) is refused unevaluated."""
        try:
            expression = _arithmetic_part(parse_expression(drawn.text))
        except ValueError as exc:
            return dataclasses.replace(drawn, text=f"{NO_ANSWER}{exc}", answer=None)
        invented = ungrounded_numbers(expression, messages) if messages is not None else []
        if invented:
            why = _finding(expression, invented)  # read back by numbers_from_question
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
        notes = (*drawn.notes, f"{expression} evaluated by {self.tool.name}")
        return dataclasses.replace(
            drawn, text=f"{expression} = {value}", answer=normalise_number(value), notes=notes
        )

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """``k`` expressions of the model, each evaluated by the tool."""
        asked = normalise_messages(messages)
        drawn = await self.model.sample(expression_prompt(asked), self._params(params), k=k)
        async with yielded_turn():  # the tool runs in a thread (the python tool in a sandbox)
            return [await asyncio.to_thread(self.evaluate, c, asked) for c in drawn]

    def sample_sync(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """Blocking twin of :meth:`sample`."""
        asked = normalise_messages(messages)
        drawn = sample_blocking(self.model, expression_prompt(asked), self._params(params), k=k)
        return [self.evaluate(c, asked) for c in drawn]
