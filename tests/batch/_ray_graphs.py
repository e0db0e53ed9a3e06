"""A test graph factory that notes each build: ``retryctl batch --ray`` must build it once per worker.

``counted_build`` appends ``<pid>`` to the file named by ``RETRYCTL_TEST_BUILDS`` (when set), then
returns :func:`tests.batch._graphs.build`'s graph with the worker's captured log.
"""

from __future__ import annotations

import os
from typing import Any

from retryctl.audit import DecisionLog
from tests.batch import _graphs


def counted_build(log: DecisionLog | None = None) -> Any:
    """The test graph, its build noted in ``$RETRYCTL_TEST_BUILDS``."""
    path = os.environ.get("RETRYCTL_TEST_BUILDS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    return _graphs.build(log)
