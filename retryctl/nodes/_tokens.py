"""The per-token part of a verdict record: which candidates' diagnostics ``extra.token_samples`` keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from retryctl.controller import TokenLog
from retryctl.nodes._state import CandidateRecord

__all__ = ["token_extra"]


def token_extra(
    candidates: Sequence[CandidateRecord], *, chosen: int | None, accepted: bool, token_log: TokenLog
) -> dict[str, Any]:
    """``{"token_samples": [...]}`` for a verdict's ``extra``, or ``{}`` when nothing is logged.

    One item per logged candidate: its index among the attempt's draws (``sample``), whether it is the
    one an ``accept`` returned (``accepted``), its answer and its diagnostics (the sample banks' field
    names: ``token_text``, ``token_logprobs``, ``token_entropy``, ``entropy_kind``, ``token_top3``,
    ``tokens_total``). ``token_log.keep == "accepted"`` keeps only the accepted one.
    """
    if not token_log.on:
        return {}
    only_accepted = token_log.keep == "accepted"
    items = []
    for i, c in enumerate(candidates):
        stats = c.get("tokens")
        if stats is None:
            continue
        is_accepted = accepted and i == chosen
        if only_accepted and not is_accepted:
            continue
        items.append({"sample": i, "accepted": is_accepted, "answer": c["answer"], **stats})
    return {"token_samples": items} if items else {}
