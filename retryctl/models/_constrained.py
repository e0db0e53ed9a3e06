"""A member that decodes under a ladder of grammars, the narrowest its strictness still allows.

    member = ConstrainedBackend(EmbeddedBackend(), [permutations, numbers])

Each call picks the rung of the ladder for ``params.strictness`` (:func:`~retryctl.models.rung_for`)
and samples the wrapped model with ``params.grammar`` set to it. The ladder is fixed, or a function of
the conversation (a grammar that admits only the question's own numbers). The policy's relaxation
schedule (:class:`~retryctl.controller.Relaxation`) lowers the strictness after output decoded under a
rung fails its checks, and :meth:`ConstrainedBackend.grammar_at` tells a driver which rung that is.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from retryctl.exceptions import ConfigError
from retryctl.models._base import ModelBackend, sample_blocking
from retryctl.models._grammar import Grammar, rung_for
from retryctl.models._messages import Message, MessagesLike, normalise_messages
from retryctl.models._types import Candidate, SamplingParams

__all__ = ["ConstrainedBackend", "Ladder"]

Ladder = Sequence[Grammar] | Callable[[list[Message]], Sequence[Grammar]]
"""Rungs from narrow to wide, or a function of the (normalised) conversation returning them."""


def _checked(ladder: object, *, empty_ok: bool) -> tuple[Grammar, ...]:
    if isinstance(ladder, Grammar | str | bytes) or not isinstance(ladder, Sequence):
        raise ConfigError(
            field="grammars", value=ladder, problem="must be a sequence of Grammar, narrow first"
        )
    rungs = tuple(ladder)
    if not rungs and not empty_ok:
        raise ConfigError(field="grammars", value=[], problem="needs at least one grammar")
    for i, g in enumerate(rungs):
        if not isinstance(g, Grammar):
            raise ConfigError(field=f"grammars[{i}]", value=g, problem="must be a retryctl Grammar")
    names = [g.name for g in rungs]
    if len(set(names)) != len(names):
        raise ConfigError(field="grammars", value=names, problem="rung names must be unique")
    for i, (narrow, wide) in enumerate(itertools.pairwise(rungs)):
        if wide.strictness > narrow.strictness:
            raise ConfigError(
                field=f"grammars[{i + 1}].strictness",
                value=wide.strictness,
                problem=f"rungs go narrow to wide: at most {narrow.strictness:g}, that of {narrow.name!r}",
            )
    return rungs


class ConstrainedBackend:
    """``model`` decoding under the rung of ``grammars`` that ``params.strictness`` allows.

    It keeps the wrapped model's name (prices, breakers and records know the member by it). Where no
    rung is allowed (each needs more strictness than is left), the model decodes unconstrained and the
    checks judge the output after decoding, as they always do. A candidate the model did not decode
    under the rung it was given (its ``grammar`` is ``None``: the backend cannot take grammars) says
    so in its notes.
    """

    sync_takes_timeout = True
    """:meth:`sample_sync` takes ``timeout_s`` and hands it to the wrapped model's call."""

    def __init__(self, model: ModelBackend, grammars: Ladder) -> None:
        if not isinstance(model, ModelBackend):
            raise ConfigError(field="model", value=model, problem="must be a model backend")
        self.model = model
        """The wrapped backend."""
        self._fixed: tuple[Grammar, ...] | None = None
        self._ladder_of: Callable[[list[Message]], Sequence[Grammar]] | None = None
        if callable(grammars) and not isinstance(grammars, Sequence):
            self._ladder_of = grammars
        else:
            self._fixed = _checked(grammars, empty_ok=False)

    @property
    def name(self) -> str:
        """The wrapped model's name."""
        return self.model.name

    def ladder(self, messages: MessagesLike) -> tuple[Grammar, ...]:
        """The rungs for this conversation, narrow first (``ConfigError`` if a ladder function returns
        anything else)."""
        if self._fixed is not None:
            return self._fixed
        assert self._ladder_of is not None
        return _checked(self._ladder_of(normalise_messages(messages)), empty_ok=True)

    def grammar_at(self, messages: MessagesLike, strictness: float) -> Grammar | None:
        """The rung a call at ``strictness`` decodes under, ``None`` for none."""
        return rung_for(self.ladder(messages), strictness)

    def _params(
        self, messages: MessagesLike, params: SamplingParams | None
    ) -> tuple[SamplingParams, Grammar | None]:
        params = params or SamplingParams()
        rung = self.grammar_at(messages, params.strictness)
        return replace(params, grammar=rung), rung

    def _said(self, drawn: list[Candidate], rung: Grammar | None) -> list[Candidate]:
        if rung is None:
            return drawn
        note = f"{self.name} did not decode under grammar {rung.name!r}; checked after decoding only"
        return [
            c
            if c.grammar is not None or any(rung.name in n for n in c.notes)
            else replace(c, notes=(*c.notes, note))
            for c in drawn
        ]

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """``k`` candidates of the wrapped model under the rung for ``params.strictness``."""
        constrained, rung = self._params(messages, params)
        return self._said(await self.model.sample(messages, constrained, k=k), rung)

    def sample_sync(
        self,
        messages: MessagesLike,
        params: SamplingParams | None = None,
        *,
        k: int = 1,
        timeout_s: float | None = None,
    ) -> list[Candidate]:
        """Blocking twin of :meth:`sample` (the wrapped model's own, through
        :func:`~retryctl.models.sample_blocking`)."""
        constrained, rung = self._params(messages, params)
        drawn = sample_blocking(self.model, messages, constrained, k=k, timeout_s=timeout_s)
        return self._said(drawn, rung)

    def output_limit(self, params: SamplingParams) -> int:
        """The wrapped model's output limit (``params.max_tokens`` when it has none)."""
        limit: Callable[[SamplingParams], int] | None = getattr(self.model, "output_limit", None)
        return limit(params) if limit is not None else params.token_cap

    async def aclose(self) -> None:
        """Release the wrapped model's resources."""
        aclose: Callable[[], Any] | None = getattr(self.model, "aclose", None)
        if aclose is not None:
            await aclose()

    def close(self) -> None:
        """Release the wrapped model's resources."""
        close: Callable[[], Any] | None = getattr(self.model, "close", None)
        if close is not None:
            close()
