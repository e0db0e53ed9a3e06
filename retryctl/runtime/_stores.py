"""Where breaker state lives, said in one word: ``memory``, ``sqlite:PATH`` or ``redis://host:port/db``.

The value of ``retryctl serve --breakers`` and ``retryctl batch --breakers`` (and the demo agent's
``breakers=``): :func:`check_breakers` says whether a value is one, :func:`breaker_store` opens the
store it names. ``memory`` is one process's own; ``sqlite:PATH`` the processes of one machine's;
a Redis URL every process on every machine that reaches the server.
"""

from __future__ import annotations

from retryctl.controller import BreakerStore, MemoryBreakerStore
from retryctl.exceptions import ConfigError
from retryctl.runtime._sqlite_store import SQLiteBreakerStore

__all__ = ["BREAKERS_SYNTAX", "breaker_store", "check_breakers"]

BREAKERS_SYNTAX = "memory, sqlite:PATH or redis://host:port/db"
"""The values a ``--breakers`` takes, as its errors name them."""


def check_breakers(where: str, *, field: str = "breakers") -> str:
    """``where`` if it names a breaker store; else a ``ConfigError`` naming ``field``."""
    kind, _, rest = where.partition(":") if isinstance(where, str) else ("", "", "")
    redis = kind in ("redis", "rediss") and rest.startswith("//") and len(rest) > 2
    if not (kind in ("memory", "sqlite") or redis) or (kind == "memory" and rest):
        raise ConfigError(field=field, value=where, problem=f"must be {BREAKERS_SYNTAX}")
    if kind == "sqlite" and not rest:
        raise ConfigError(
            field=field,
            value=where,
            problem="sqlite: needs a path, e.g. sqlite:/var/lib/retryctl/breakers.db",
        )
    return where


def breaker_store(where: str) -> BreakerStore:
    """The store ``where`` names (checked by :func:`check_breakers`); a Redis URL needs the ``redis``
    package (the ``workers`` extra)."""
    check_breakers(where)
    if where == "memory":
        return MemoryBreakerStore()
    if where.startswith("sqlite:"):
        return SQLiteBreakerStore(where.removeprefix("sqlite:"))
    from retryctl.runtime._redis_store import RedisBreakerStore

    return RedisBreakerStore.from_url(where)
