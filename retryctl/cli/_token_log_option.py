"""``--token-log`` and ``--token-log-max``: the policy's per-token log, from the command line.

``demo``, ``batch`` and ``serve`` take them; each applies them on top of its own policy (the demo's tuned
one stays the demo's), so an option not given leaves that policy's setting as it is.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from retryctl.controller._token_log import TokenLog

__all__ = ["Keep", "TokenLogMaxOption", "TokenLogOption", "token_log_of"]


class Keep(StrEnum):
    """The choices of ``--token-log`` (typer lists them, and refuses any other naming the option)."""

    off = "off"
    accepted = "accepted"
    all = "all"


TokenLogOption = Annotated[
    Keep | None,
    typer.Option(
        "--token-log",
        help="Per-token data in each verdict record (the audit's heat map): every candidate's (all, "
        "the default), the accepted one's, or none (off).",
    ),
]
TokenLogMaxOption = Annotated[
    int | None,
    typer.Option("--token-log-max", min=1, max=4096, help="Tokens logged per candidate (default 64)."),
]


def token_log_of(keep: Keep | None, max_tokens: int | None, base: TokenLog) -> TokenLog | None:
    """``base`` with the options given applied; ``None`` when neither was given (nothing to change)."""
    if keep is None and max_tokens is None:
        return None
    update: dict[str, object] = {}
    if keep is not None:
        update["keep"] = keep.value
    if max_tokens is not None:
        update["max_tokens"] = max_tokens
    return TokenLog.model_validate(base.model_dump() | update)
