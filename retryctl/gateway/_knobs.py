"""The output knobs the gateway honours when it samples itself (the embedded model, adaptive requests):
``logprobs``, ``top_logprobs``, ``response_format`` (and ``stop`` on every adaptive sample).

Their shape is checked at the edge for every mode (:mod:`._fields`); a proxied request keeps them as
sent. Where the gateway samples, each is either done (the embedded model decodes a JSON answer under a
grammar and reads every token's logprob) or refused with a 400 naming the field: never dropped in
silence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from retryctl.exceptions import ConfigError
from retryctl.gateway._errors import ApiError
from retryctl.gateway._request import ChatRequest
from retryctl.models import Candidate, ModelBackend, SamplingParams

__all__ = ["Knobbed", "OutputKnobs", "output_knobs"]


@dataclass(frozen=True)
class OutputKnobs:
    """What a request asked of its output beyond the text."""

    top_logprobs: int | None = None
    """Alternatives per token to return with each token's logprob; ``None``: no logprobs asked."""
    response_format: dict[str, Any] | None = None
    """OpenAI's ``response_format`` (``text``, ``json_object``, ``json_schema``), ``None`` when unset."""

    def apply(self, params: SamplingParams) -> SamplingParams:
        """``params`` with these knobs (a bad ``response_format`` is a 400 naming its field)."""
        changes: dict[str, Any] = {}
        if self.top_logprobs is not None:
            changes.update(logprobs=True, top_logprobs=max(self.top_logprobs, params.top_logprobs))
        if self.response_format is not None:
            changes["response_format"] = self.response_format
        try:
            return dataclasses.replace(params, **changes) if changes else params
        except ConfigError as exc:
            raise ApiError(
                400, f"invalid '{exc.field}': {exc.problem}", param=exc.field, code="invalid_value"
            ) from None


class Knobbed:
    """``backend`` drawing every sample of an adaptive request under the request's own ``response_format``
    and ``stop`` (and its logprobs): the sampling loop builds each draw's parameters from its schedule,
    which knows only the temperature, ``top_p``, the seed, ``max_tokens`` and the cut bound."""

    def __init__(self, backend: ModelBackend, asked: SamplingParams) -> None:
        self._backend = backend
        self._asked = asked

    @property
    def name(self) -> str:
        """The backend's name (the decision log's ``target``)."""
        return self._backend.name

    async def sample(
        self, messages: Any, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """The backend's ``k`` candidates under ``params`` with the request's output knobs."""
        asked = self._asked
        drawn = dataclasses.replace(
            params or asked,
            response_format=asked.response_format,
            stop=asked.stop,
            logprobs=(params or asked).logprobs or asked.logprobs,
            top_logprobs=max((params or asked).top_logprobs, asked.top_logprobs),
        )
        return await self._backend.sample(messages, drawn, k=k)


def output_knobs(request: ChatRequest) -> OutputKnobs:
    """The output knobs of ``request``, whose shape the edge has checked (:mod:`._fields`)."""
    fmt = request.response_format
    if fmt is not None and fmt.get("type") == "text":
        fmt = None  # the default: nothing to constrain
    top = request.top_logprobs
    return OutputKnobs(top_logprobs=(top or 0) if request.logprobs else None, response_format=fmt)
