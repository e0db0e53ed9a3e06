"""The most tokens one answer of a LangChain chat model can have, read from the model as it was built.

A ledger charges a call at most what it reserved, so the output-token reservation of a call must be
the limit the model really works under. Chat model classes name it differently; read by name, without
importing any of them: ``max_tokens`` (``ChatOpenAI``, whose ``max_completion_tokens`` is an alias of
it, ``ChatAnthropic``, ``ChatMistralAI``, ``ChatGroq``...), ``max_completion_tokens``,
``max_output_tokens`` (``ChatGoogleGenerativeAI``, ``ChatVertexAI``), ``max_new_tokens`` (Hugging Face),
``num_predict`` (``ChatOllama``; -1 and -2 mean no limit), ``max_tokens_to_sample``; then the same names
in ``model_kwargs``.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["output_token_limit"]

_NAMES = (
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "max_new_tokens",
    "num_predict",
    "max_tokens_to_sample",
)


def _limit(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def output_token_limit(model: object) -> int | None:
    """The output-token limit ``model`` was built with (see the module docstring); ``None``: it sets none."""
    for name in _NAMES:
        if (limit := _limit(getattr(model, name, None))) is not None:
            return limit
    kwargs = getattr(model, "model_kwargs", None)
    if isinstance(kwargs, Mapping):
        for name in _NAMES:
            if (limit := _limit(kwargs.get(name))) is not None:
                return limit
    return None
