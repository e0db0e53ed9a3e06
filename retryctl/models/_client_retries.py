"""One HTTP try per attempt: the chat model's own client retries turned off for the calls the
controller wraps.

``ChatOpenAI`` (and every chat model built on the ``openai`` SDK) sends a failed request again inside
one call, twice by default, with a backoff of its own; ``ChatAnthropic``'s ``max_retries`` does the
same. Under :class:`~retryctl.middleware.RetryController`, or a
:class:`~retryctl.models.LangChainBackend` under :class:`~retryctl.nodes.ControlledStep`, that stacks:
each try the controller makes
and charges is up to three HTTP requests and their waits, which the ledger, the log and the model's
breaker never see (a dead endpoint: 6.4 s a call against 0.4 s with ``max_retries=0``), and
``Budget(attempts=...)`` or ``wall_s`` bound tries that are not the real ones.

Two ways out: charge each hidden retry to the ledger and log it (the step does so for retryctl's own
backends, whose transport reports every retry), or turn them off. A LangChain chat model reports
nothing of its client's retries, so they could only be counted by hooking its HTTP client; and the
controller already does what they do, better: it retries a transient fault with backoff (at least the
server's ``Retry-After``), charges and logs each try, counts it against the model's breaker, and
switches to a fallback instead of waiting on a dead model. So they are turned off: the controller
calls a copy of the model with ``max_retries=0`` and its SDK clients copied with
``with_options(max_retries=0)`` (they share the original's connection pool). The user's model is not
changed. Every HTTP try is then one attempt of the engine, seen, charged and logged.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from langchain_core.language_models import BaseChatModel

__all__ = ["client_retries", "without_client_retries"]

_CLIENTS = (("root_client", "client"), ("root_async_client", "async_client"))
"""The ``openai`` SDK clients of ``ChatOpenAI`` and its kin: the root client and the resource the
model calls on it (``root.chat.completions``)."""


def client_retries(model: BaseChatModel) -> int:
    """The most HTTP retries ``model``'s own client makes inside one call (0: none it declares)."""
    found = [getattr(model, "max_retries", None)]
    found += [getattr(getattr(model, root, None), "max_retries", None) for root, _ in _CLIENTS]
    return max((n for n in found if isinstance(n, int) and not isinstance(n, bool)), default=0)


def without_client_retries(model: BaseChatModel) -> BaseChatModel:
    """``model`` itself when its client makes no retries of its own, else a copy that makes none
    (see the module docstring)."""
    if client_retries(model) == 0:
        return model
    update: dict[str, Any] = {}
    if "max_retries" in type(model).model_fields:
        update["max_retries"] = 0
    for root_name, leaf_name in _CLIENTS:
        root = getattr(model, root_name, None)
        with_options = getattr(root, "with_options", None)
        if root is None or not callable(with_options):
            continue
        quiet = with_options(max_retries=0)
        update[root_name] = quiet
        leaf = getattr(model, leaf_name, None)
        completions = getattr(getattr(root, "chat", None), "completions", None)
        if leaf is not None and leaf is completions:  # the resource of the root: now the new root's
            update[leaf_name] = quiet.chat.completions
    copy = model.model_copy(update=update)
    # A client built lazily from ``max_retries`` and cached on the instance (``ChatAnthropic._client``)
    # was copied with it: dropped, so the copy builds its own from ``max_retries=0``.
    for klass in type(model).__mro__:
        for name, attr in vars(klass).items():
            if isinstance(attr, cached_property) and "client" in name:
                copy.__dict__.pop(name, None)
    return copy
