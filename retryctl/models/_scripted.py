"""A deterministic backend for tests: hands out scripted answers and errors in order, and records calls.

    backend = ScriptedBackend(["41", "42", TransientBackendError("503", backend="x"), "42"])

Each item is consumed by one candidate: a string becomes a candidate with that text, a
:class:`~retryctl.models.Candidate` is served as it is, an exception fails the call that reaches it, and a
callable ``(messages, params) -> str | Candidate`` is asked at that point.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from retryctl.exceptions import ConfigError
from retryctl.models._base import BackendBase, check_k
from retryctl.models._errors import ReplayExhausted
from retryctl.models._messages import Message, MessagesLike, normalise_messages
from retryctl.models._types import Candidate, SamplingParams, TokenLogprob, Usage

__all__ = ["ScriptItem", "ScriptedBackend", "ScriptedCall"]

ScriptItem = str | Candidate | BaseException | Callable[[list[Message], SamplingParams], str | Candidate]
"""What one scripted candidate can be."""


@dataclass(frozen=True)
class ScriptedCall:
    """One call the scripted backend received."""

    messages: list[Message]
    """The conversation, normalised."""
    params: SamplingParams
    """The sampling parameters."""
    k: int
    """How many candidates were asked for."""


class ScriptedBackend(BackendBase):
    """Serves a script, item by item. ``confidence`` gives each text candidate token logprobs.

    With ``confidence=p`` every whitespace-separated word of a string item becomes one token with
    logprob ``log p``, so its token confidence is exactly ``p``; ``None`` gives no logprobs. With
    ``cycle=True`` the script starts over when it ends, otherwise the call that runs past the end
    raises :class:`~retryctl.models.ReplayExhausted`.
    """

    def __init__(
        self,
        script: Iterable[ScriptItem],
        *,
        model: str = "scripted",
        confidence: float | None = None,
        cycle: bool = False,
    ) -> None:
        super().__init__()
        self.script = list(script)
        if cycle and not self.script:
            raise ConfigError(field="script", value=self.script, problem="cannot cycle an empty script")
        if confidence is not None and not (0.0 < confidence <= 1.0):
            raise ConfigError(field="confidence", value=confidence, problem="must be in (0, 1]")
        self._model = model
        self.confidence = confidence
        self.cycle = cycle
        self.calls: list[ScriptedCall] = []
        """Every call received, in order."""
        self._next = 0
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._model

    @property
    def remaining(self) -> int:
        """Items not served yet (before cycling)."""
        return len(self.script) - self._next

    def _take(self) -> ScriptItem:
        with self._lock:
            if self._next >= len(self.script):
                if not self.cycle:
                    raise ReplayExhausted(f"script of {len(self.script)} items exhausted", backend=self.name)
                self._next = 0
            item = self.script[self._next]
            self._next += 1
            return item

    def _from_text(self, text: str, seed: int | None) -> Candidate:
        words = text.split()
        logprobs = None
        if self.confidence is not None:
            lp = math.log(self.confidence)
            logprobs = tuple(TokenLogprob(token=w, logprob=lp) for w in words or [""])
        return Candidate(
            text=text,
            model=self.name,
            logprobs=logprobs,
            finish_reason="stop",
            usage=Usage(0, len(words)),
            seed=seed,
        )

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """The next k scripted candidates; an exception item is raised when reached."""
        check_k(k)
        params = params or SamplingParams()
        msgs = normalise_messages(messages)
        self.calls.append(ScriptedCall(messages=msgs, params=params, k=k))
        out: list[Candidate] = []
        for i in range(k):
            seed = None if params.seed is None else params.seed + i
            item = self._take()
            if isinstance(item, BaseException):
                raise item
            if callable(item) and not isinstance(item, Candidate):
                item = item(msgs, params)
            if isinstance(item, Candidate):
                out.append(replace(item, seed=item.seed if item.seed is not None else seed))
            else:
                out.append(self._from_text(item, seed))
        return out
