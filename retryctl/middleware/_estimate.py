"""What a model call may cost, reserved on the run's ledger before it runs, and what it did cost.

A ledger charges a call at most what it reserved (so no total passes a limit), so a reservation must
be an upper bound. The prompt's is :func:`~retryctl.models._prompt_bound.prompt_tokens_bound`, plus its
tools' schemas at two characters a token (JSON is mostly words and punctuation). The answer is bounded
by the model's own output limit when it has one (``max_tokens``, ``max_output_tokens``, ``num_predict``:
:func:`~retryctl.models._output_limit.output_token_limit`), else by what the budget has left. A limit
that is off reserves :data:`UNBOUNDED`, so the actual use is always charged in full.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from retryctl.controller import Budget, Exhaustion, Ledger, PriceTable, Reservation, Usage
from retryctl.models._output_limit import output_token_limit
from retryctl.models._prompt_bound import prompt_tokens_bound

__all__ = ["UNBOUNDED", "actual_usage", "estimate_usage", "estimates", "model_key", "reserve"]

UNBOUNDED = 10**12
"""What a call reserves of a quantity whose limit is off."""


def model_key(model: BaseChatModel) -> str:
    """The name a model goes by in verdicts, breakers and prices: its ``model_name`` (or ``model``,
    ``model_id``), else its class name."""
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def _input_bound(messages: Sequence[BaseMessage], tools: Sequence[BaseTool | dict[str, Any]]) -> int:
    texts = [str(m.content) + json.dumps(getattr(m, "tool_calls", []) or []) for m in messages]
    schemas = 0
    for tool in tools:
        try:
            schemas += len(json.dumps(tool if isinstance(tool, dict) else convert_to_openai_tool(tool)))
        except (TypeError, ValueError):
            schemas += 2000  # a schema that does not serialise still costs tokens
    return prompt_tokens_bound(texts) + schemas // 2


def estimate_usage(
    *,
    model: BaseChatModel,
    key: str,
    messages: Sequence[BaseMessage],
    tools: Sequence[BaseTool | dict[str, Any]],
    remaining: Budget,
    prices: PriceTable | None,
) -> Usage:
    """The reservation of one model call (one attempt, one sample)."""
    # Measuring the prompt (its tools' schemas included) only matters under a token limit.
    input_tokens = UNBOUNDED
    if remaining.input_tokens is not None:
        input_tokens = _input_bound(messages, tools)
    if remaining.output_tokens is None:
        output_tokens = UNBOUNDED
    elif (limit := output_token_limit(model)) is not None:
        output_tokens = limit
    else:
        output_tokens = max(1, int(remaining.output_tokens))  # unknown: it may take what is left
    usd = 0.0
    if prices is not None:
        if remaining.usd is None:
            usd = float(UNBOUNDED)
        elif UNBOUNDED in (input_tokens, output_tokens):
            usd = remaining.usd  # no bound on tokens, so none on money but the budget's
        else:
            usd = prices.cost(key, input_tokens=input_tokens, output_tokens=output_tokens)
    return Usage(attempts=1, samples=1, input_tokens=input_tokens, output_tokens=output_tokens, usd=usd)


def actual_usage(messages: Sequence[BaseMessage], key: str, prices: PriceTable | None) -> Usage:
    """What a finished call used, from its messages' ``usage_metadata`` (0 tokens where none)."""
    tokens_in = tokens_out = 0
    for message in messages:
        meta = message.usage_metadata if isinstance(message, AIMessage) else None
        if meta:
            tokens_in += int(meta.get("input_tokens", 0))
            tokens_out += int(meta.get("output_tokens", 0))
    usd = prices.cost(key, input_tokens=tokens_in, output_tokens=tokens_out) if prices else 0.0
    return Usage(attempts=1, samples=1, input_tokens=tokens_in, output_tokens=tokens_out, usd=usd)


_UNLIMITED = Budget()


def estimates(
    ledger: Ledger,
    *,
    messages: Sequence[BaseMessage],
    tools: Sequence[BaseTool | dict[str, Any]],
    models: Mapping[str, BaseChatModel],
    prices: PriceTable | None,
) -> dict[str, Usage]:
    """What a call of ``messages`` and ``tools`` would reserve on each of ``models``, by member key."""
    # What is left matters only under a token or USD limit (a limit that is off stays off, even
    # after an ``extend``): without one the ledger is not read a second time.
    limits = ledger.budget
    bounded = any(x is not None for x in (limits.input_tokens, limits.output_tokens, limits.usd))
    remaining = ledger.remaining() if bounded else _UNLIMITED
    return {
        key: estimate_usage(
            model=model, key=key, messages=messages, tools=tools, remaining=remaining, prices=prices
        )
        for key, model in models.items()
    }


def reserve(
    ledger: Ledger,
    *,
    messages: Sequence[BaseMessage],
    tools: Sequence[BaseTool | dict[str, Any]],
    key: str,
    model: BaseChatModel,
    prices: PriceTable | None,
) -> Reservation | Exhaustion:
    """Reserve one call of ``model`` (member ``key``) on ``ledger``, or the limit that refuses it (one
    already spent is named without estimating)."""
    spent = ledger.exhausted()
    if spent is not None:
        return spent
    one = estimates(ledger, messages=messages, tools=tools, models={key: model}, prices=prices)
    return ledger.try_reserve(one[key])
