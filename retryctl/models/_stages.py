"""Stages of one sample: a ``think`` stage and an ``answer`` stage (or user-named ones), each decoded with
its own temperature, top-p, top-k, min-p and token cap, as separate requests, the second continuing the
first's text (prompt + text so far).

A stage's ``None`` knob takes the draw's own value (:class:`~retryctl.models.SamplingParams`). Where a
stage is cut by its ``max_tokens`` before any of its ``end`` strings, ``end[0]`` is appended to its text
before the next stage starts, so the next stage always continues after a closed stage (a model family's
``</think>``). Delimiters are options: nothing here knows any model family's.

A staged sample's answer is read from its **last stage's** text alone (:func:`answer_text`): a
``think`` stage's working is not its answer, and no stage's ``start`` or ``end`` delimiter reaches it.
A sample whose last stage did not run (cut short before it) has no answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from retryctl.exceptions import ConfigError

__all__ = ["Stage", "StageOutcome", "answer_text", "check_stages", "staged_input_bound"]

_CLI_RESERVED = (":", ",")
"""Characters a stage's name cannot hold: ``--stage NAME:key=value,...`` could not write it back."""


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One stage of a staged sample (see the module docstring)."""

    name: str
    """``"think"``, ``"answer"`` or a user's name; unique within a schedule."""
    max_tokens: int
    """The stage's token cap."""
    temperature: float | None = None
    """The stage's temperature; ``None``: the draw's (the schedule's attempt temperature)."""
    top_p: float | None = None
    """The stage's nucleus mass in (0, 1]; ``None``: the draw's."""
    top_k: int | None = None
    """The stage's top-k; ``None``: the draw's."""
    min_p: float | None = None
    """The stage's min-p in [0, 1]; ``None``: the draw's."""
    start: str = ""
    """Text the stage opens with (a model family's delimiter, e.g. ``"<think>\\n"``): appended to the
    continuation before the stage's own tokens, and part of the sample's text. An option, never guessed."""
    end: tuple[str, ...] = ()
    """Strings that end the stage (e.g. ``("</think>",)``). The matched string is kept in the text so the
    next stage continues after it; a stage cut by its ``max_tokens`` gets ``end[0]`` appended."""

    def __post_init__(self) -> None:
        end = (self.end,) if isinstance(self.end, str) else tuple(self.end)
        object.__setattr__(self, "end", end)
        _check(self, f"stages[{self.name!r}]")

    @classmethod
    def coerce(cls, stage: Stage | Mapping[str, Any], where: str) -> Stage:
        """Accept a Stage or a dict of its fields; errors name the field at ``where`` (``stages[1]``)."""
        if isinstance(stage, Stage):
            return stage
        if not isinstance(stage, Mapping):
            raise ConfigError(field=where, value=stage, problem="must be a Stage or a dict of its fields")
        try:
            return cls(**stage)
        except TypeError as err:
            raise ConfigError(field=where, value=dict(stage), problem=str(err)) from None
        except ConfigError as err:
            # Name the stage by its place in the sequence, which a dict's author knows it by.
            knob = err.field.rsplit("].", 1)[-1]
            raise ConfigError(field=f"{where}.{knob}", value=err.value, problem=err.problem) from None


def _check(stage: Stage, where: str) -> None:
    if not isinstance(stage.name, str) or not stage.name.strip():
        raise ConfigError(field=f"{where}.name", value=stage.name, problem="must be a non-empty string")
    if any(c in stage.name for c in _CLI_RESERVED) or stage.name != stage.name.strip():
        raise ConfigError(
            field=f"{where}.name",
            value=stage.name,
            problem="must not hold ':' or ',' or start or end with a space (--stage NAME:... could not "
            "write it)",
        )
    if isinstance(stage.max_tokens, bool) or not isinstance(stage.max_tokens, int) or stage.max_tokens < 1:
        raise ConfigError(field=f"{where}.max_tokens", value=stage.max_tokens, problem="must be an int >= 1")
    t = stage.temperature
    if t is not None and (not 0.0 <= t <= 5.0 or math.isnan(t)):
        raise ConfigError(field=f"{where}.temperature", value=t, problem="must be in [0, 5]")
    if stage.top_p is not None and not 0.0 < stage.top_p <= 1.0:
        raise ConfigError(field=f"{where}.top_p", value=stage.top_p, problem="must be in (0, 1]")
    if stage.top_k is not None and stage.top_k < 1:
        raise ConfigError(field=f"{where}.top_k", value=stage.top_k, problem="must be at least 1")
    m = stage.min_p
    if m is not None and (not 0.0 <= m <= 1.0 or math.isnan(m)):
        raise ConfigError(field=f"{where}.min_p", value=m, problem="must be in [0, 1]")
    if not isinstance(stage.start, str):
        raise ConfigError(field=f"{where}.start", value=stage.start, problem="must be a string")
    if any(not isinstance(s, str) or not s for s in stage.end):
        raise ConfigError(field=f"{where}.end", value=stage.end, problem="must be non-empty strings")


def check_stages(
    stages: Sequence[Stage | Mapping[str, Any]] | None, *, field: str = "stages"
) -> tuple[Stage, ...]:
    """``stages`` as a tuple of checked :class:`Stage` (dicts converted): names unique, and at least one
    where a sequence is given at all (``()`` or ``None`` means unstaged and gives ``()``)."""
    if stages is None:
        return ()
    if isinstance(stages, (str, Stage, Mapping)) or not isinstance(stages, Sequence):
        raise ConfigError(field=field, value=stages, problem="must be a sequence of Stage")
    out = tuple(Stage.coerce(s, f"{field}[{i}]") for i, s in enumerate(stages))
    seen: set[str] = set()
    for i, stage in enumerate(out):
        if stage.name in seen:
            raise ConfigError(
                field=f"{field}[{i}].name", value=stage.name, problem="stage names must be unique"
            )
        seen.add(stage.name)
    return out


def staged_input_bound(prompt_bound: int, stages: Sequence[Stage], text_bound: Callable[[str], int]) -> int:
    """An upper bound on the prompt tokens one staged sample is billed, given a bound on its prompt's:
    each stage's request reads the prompt and all that came before it (an OpenAI-compatible server
    bills every request whole; the embedded model, reading its own tokens back from its cache, less).
    ``text_bound`` bounds the tokens of a ``start``/``end`` text."""
    total, before = 0, 0
    for stage in stages:
        before += text_bound(stage.start) if stage.start else 0
        total += prompt_bound + before
        before += stage.max_tokens + max((text_bound(e) for e in stage.end), default=0)
    return total


@dataclass(frozen=True)
class StageOutcome:
    """What one stage of a sample produced."""

    name: str
    """The stage's name."""
    text: str
    """This stage's part of the sample's text (its ``start`` included, and an ``end[0]`` appended when
    it was cut by its ``max_tokens``)."""
    tokens: int
    """Tokens the stage generated."""
    finish_reason: str
    """``"stop"`` (an end string or the end of text), ``"length"`` (its ``max_tokens``) or ``"cut"``
    (``cut_below``)."""
    prompt_tokens: int | None = None
    """Prompt tokens the backend (re-)evaluated for this stage's request, where known."""


def answer_text(outcomes: Sequence[StageOutcome], stages: Sequence[Stage]) -> str | None:
    """The text a staged sample's answer is read from: its last stage's, without that stage's
    ``start`` (at its front) and a closing ``end`` string (at its back), and without any stage's
    delimiter of two or more characters (a ``</think>`` the model wrote again) wherever it occurs,
    each replaced by a line break. ``None`` when the last stage did not run (the sample was cut
    before it). Shorter delimiters (an ``end="."``) are taken off at the edges only, so that the
    ``.`` of ``12.5`` stays."""
    if not stages or not outcomes or outcomes[-1].name != stages[-1].name or len(outcomes) != len(stages):
        return None
    last, text = stages[-1], outcomes[-1].text
    if last.start and text.startswith(last.start):
        text = text[len(last.start) :]
    for end in sorted(last.end, key=len, reverse=True):
        if text.endswith(end):
            text = text[: -len(end)]
            break
    delimiters = {d.strip() for s in stages for d in (s.start, *s.end)}
    for delimiter in sorted((d for d in delimiters if len(d) >= 2), key=len, reverse=True):
        text = text.replace(delimiter, "\n")
    return text
