"""What the pure controller needs from the world, kept out of it: breaker stores that do I/O, and a
verifier run under a time limit.

    from retryctl.runtime import SQLiteBreakerStore   # processes of one machine share a file
    from retryctl.runtime import RedisBreakerStore    # workers on many machines ([workers] extra)
    from retryctl.runtime import verify, averify      # a user's verifier, bounded in time

:class:`~retryctl.controller.Breaker` takes any of them as its ``store``; the in-memory store, the store
protocol and the record it keeps stay in :mod:`retryctl.controller`, which imports no I/O module (a test
walks its imports).
"""

from typing import TYPE_CHECKING

from retryctl.runtime._sqlite_store import SQLiteBreakerStore
from retryctl.runtime._verifier import averify, verify

if TYPE_CHECKING:
    from retryctl.runtime._redis_store import RedisBreakerStore

__all__ = ["RedisBreakerStore", "SQLiteBreakerStore", "averify", "verify"]


def __getattr__(name: str) -> object:
    # RedisBreakerStore needs the optional redis package ([workers]): imported on first use, so that
    # `import retryctl.runtime` works without it.
    if name == "RedisBreakerStore":
        from retryctl.runtime._redis_store import RedisBreakerStore

        return RedisBreakerStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
