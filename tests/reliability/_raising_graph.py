"""A ``--graph`` factory that fails as a user's can: ``--graph tests.reliability._raising_graph:build``."""

from __future__ import annotations

from typing import Any


def build(log: Any = None) -> Any:
    """Raise as a factory whose model server address is missing would."""
    raise RuntimeError("MODEL_URL is not set\nsecond line of detail")
