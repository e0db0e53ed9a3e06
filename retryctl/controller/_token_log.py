"""How much per-token data the decision log keeps (the audit's heat map reads it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TokenLog"]


class TokenLog(BaseModel):
    """Which candidates' per-token diagnostics a verdict record carries, and how many tokens each.

    Each logged candidate is one item of the record's ``extra.token_samples``: its tokens' text,
    logprob, entropy (``entropy_kind`` says whether the whole distribution's or a top-k estimate) and
    top-3 mass. Nothing is computed when ``keep`` is ``"off"`` or the backend gave no logprobs.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    keep: Literal["off", "accepted", "all"] = "all"
    """``all``: every candidate of every verdict; ``accepted``: only the candidate an ``accept``
    returns; ``off``: none."""
    max_tokens: int = Field(default=64, ge=1, le=4096, strict=True)
    """The first tokens of each candidate that are logged (the record says how many there were); an
    int, not a string of one."""

    @property
    def on(self) -> bool:
        """Whether anything is logged."""
        return self.keep != "off"
