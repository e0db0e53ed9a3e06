"""The graph a batch runs: ``module:attr`` resolved to a compiled graph or a factory that builds one.

``retryctl batch --graph module:attr`` names it; a factory is called with the options it takes
(``base_url``, ``model_name``, ``checkpointer``...), and an option it does not take is refused by name.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from retryctl.exceptions import ConfigError

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ["DEFAULT_GRAPH", "Invocable", "load_graph"]

DEFAULT_GRAPH = "retryctl.agent:build_demo_graph"
"""The graph ``retryctl batch`` runs unless ``--graph`` names another."""


class Invocable(Protocol):
    """What the batch needs of a graph: LangGraph's ``ainvoke``.

    A compiled LangGraph graph with a checkpointer is called with ``durability="sync"`` too; any other
    object only as below (a wrapper that checkpoints chooses its own durability).
    """

    def ainvoke(self, input: Any, config: Any = None) -> Awaitable[Any]:
        """Run the graph once."""
        ...


def load_graph(
    spec: str, *, checkpointer: BaseCheckpointSaver[Any] | None = None, **factory_kwargs: Any
) -> Invocable:
    """Import ``module:attr``: a compiled graph, an uncompiled ``StateGraph``, or a factory returning either.

    A factory is called with ``factory_kwargs`` (e.g. ``log=DecisionLog(...)``); passing any to a
    graph, or ones the factory does not take, is a :class:`ConfigError` naming them. An uncompiled
    graph is compiled. ``checkpointer`` goes to a factory that takes a ``checkpointer`` keyword, else
    to ``StateGraph.compile``; a graph that does not end up compiled with it (a compiled graph, a
    factory that ignores it or compiles its own) is a :class:`ConfigError`: its tasks could not resume.
    """
    # Imported here, not with the module: the CLI loads LangGraph only for the commands that use it.
    from langgraph.graph import StateGraph

    obj = _resolve(spec)
    if not hasattr(obj, "ainvoke") and not isinstance(obj, StateGraph) and callable(obj):
        kwargs = dict(factory_kwargs)
        if checkpointer is not None and _takes(obj, "checkpointer"):
            kwargs["checkpointer"] = checkpointer
        _check_kwargs(spec, obj, kwargs)
        obj = obj(**kwargs)
    elif factory_kwargs:
        names = ", ".join(sorted(factory_kwargs))
        problem = f"a graph takes no options ({names}); name a factory"
        raise ConfigError(field="graph", value=spec, problem=problem)
    if isinstance(obj, StateGraph):
        obj = obj.compile(checkpointer=checkpointer)
    if not hasattr(obj, "ainvoke"):
        raise ConfigError(
            field="graph", value=spec, problem="neither a graph nor a factory returning one (no ainvoke)"
        )
    if checkpointer is not None and getattr(obj, "checkpointer", None) is not checkpointer:
        raise ConfigError(
            field="graph",
            value=spec,
            problem=(
                "cannot take a checkpointer: name a factory with a 'checkpointer' parameter that "
                "compiles the graph with it, or an uncompiled StateGraph"
            ),
        )
    graph: Invocable = obj
    return graph


def _resolve(spec: str) -> Any:
    """The object ``module:attr`` names."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(field="graph", value=spec, problem="expected 'module:attr'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(field="graph", value=spec, problem=f"cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(field="graph", value=spec, problem=f"{module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _takes(factory: Any, name: str) -> bool:
    """Whether ``factory`` accepts the keyword ``name`` (``**kwargs`` counts)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _check_kwargs(spec: str, factory: Any, kwargs: dict[str, Any]) -> None:
    if not kwargs:
        return
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature: let the call decide
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        raise ConfigError(
            field="graph", value=spec, problem=f"the factory takes no option(s) {', '.join(unknown)}"
        )
