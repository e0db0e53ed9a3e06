"""Names a package exports from its submodules, imported on first use (PEP 562).

``import retryctl`` (which every ``retryctl.*`` import runs first) and the subpackages' ``__init__``
would otherwise import the controller, pydantic models, LangGraph and the log writer: ``retryctl
audit`` started in 0.45 s with them and starts in 0.15 s without.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    namespace: MutableMapping[str, Any], modules: Mapping[str, str], *, subpackages: Collection[str] = ()
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose ``globals()`` is ``namespace``.

    ``modules`` maps each exported name to the submodule (relative to the package) that defines it;
    ``subpackages`` are reachable as attributes without an import, as they were when the package
    imported them eagerly.
    """
    package = str(namespace["__name__"])

    def __getattr__(name: str) -> object:
        if name in subpackages:
            return importlib.import_module(f"{package}.{name}")
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value  # later lookups skip this function
        return value

    exported: list[str] = list(namespace.get("__all__", ()))

    def __dir__() -> list[str]:
        return sorted({*namespace, *exported})

    return __getattr__, __dir__
