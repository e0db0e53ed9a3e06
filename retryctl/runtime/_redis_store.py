"""Breaker state in Redis: one store shared by every worker process on every machine that reaches it.

Each key's :class:`BreakerRecord` is a Redis hash ``{namespace}:rec:{key}`` (fields left out where the
record holds ``None``; ``updated_at`` says when a worker last wrote it), and ``{namespace}:keys`` is the
set of keys written, so :meth:`RedisBreakerStore.items` needs no ``SCAN`` over the whole server.

Atomicity: :meth:`RedisBreakerStore.update` is an optimistic transaction (``WATCH`` the record, read it,
apply ``fn``, write in ``MULTI``/``EXEC``; if another client wrote the record after the ``WATCH``, ``EXEC``
does nothing and we read and apply again). We chose it over a Lua script because ``update`` takes any
Python function: a script would need :class:`~retryctl.controller.Breaker`'s state machine written a
second time in Lua, and the two copies would drift. The price is that ``fn`` may run more than once, so
it must be pure (the breaker's transitions are), and that a hot key costs a retry per lost race.

Clock: workers on different machines disagree about wall time, and a cool-down is measured between two
of them (one opens the breaker, another admits the probe). So the default clock is the Redis server's
own (``TIME``): one more round trip per decision, and one clock for every worker.

Faults: any error of the client (the server refused the connection, timed out, went away mid-command)
is raised as :class:`~retryctl.exceptions.BreakerStoreError` naming the server and the operation; the
breaker decides what that means (``BreakerConfig.on_store_error``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any, TypeVar

from retryctl.controller._breaker_store import (
    CLOSED_RECORD,
    BreakerRecord,
    BreakerState,
    Update,
    summary,
)
from retryctl.controller._clock import Clock
from retryctl.exceptions import BreakerStoreError, MissingExtra

try:
    import redis
    from redis.client import Pipeline
    from redis.typing import EncodableT, FieldT
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtra(feature="RedisBreakerStore", extra="workers", module=exc.name) from exc

__all__ = ["RedisBreakerStore"]

T = TypeVar("T")

_FLOATS = ("opened_at", "last_probe_at")
_INTS = ("failures", "probes", "successes")


def _text(value: bytes | str) -> str:
    # A client made without decode_responses=True answers in bytes; accept either.
    return value.decode() if isinstance(value, bytes) else value


def _decode(raw: dict[bytes | str, bytes | str]) -> BreakerRecord:
    if not raw:
        return CLOSED_RECORD
    fields = {_text(k): _text(v) for k, v in raw.items()}
    return BreakerRecord(
        state=BreakerState(fields["state"]),
        failures=int(fields.get("failures", 0)),
        opened_at=float(fields["opened_at"]) if "opened_at" in fields else None,
        probes=int(fields.get("probes", 0)),
        successes=int(fields.get("successes", 0)),
        last_probe_at=float(fields["last_probe_at"]) if "last_probe_at" in fields else None,
    )


def _encode(record: BreakerRecord) -> dict[FieldT, EncodableT]:
    fields: dict[FieldT, EncodableT] = {"state": record.state.value, "updated_at": time.time()}
    fields.update({name: getattr(record, name) for name in _INTS})
    # repr keeps every bit of a float: the record read back equals the record written.
    fields.update({name: repr(v) for name in _FLOATS if (v := getattr(record, name)) is not None})
    return fields


class RedisBreakerStore:
    """Records in Redis: shared by processes on many machines, kept as long as the server keeps them.

    Methods are thread-safe (the client's connection pool is) and block on the network, so async
    breaker methods run them in a worker thread. A store made before ``fork()`` works in the child: the
    client's pool opens new connections there. ``namespace`` keeps several deployments apart on one
    server. Redis Cluster is not supported (the record and the key set may live on different nodes).
    """

    blocking: bool = True
    default_clock: Clock

    def __init__(self, client: redis.Redis, *, namespace: str = "retryctl:breaker") -> None:
        if not namespace:
            raise ValueError("namespace must not be empty")
        self.client = client
        self.namespace = namespace
        self.default_clock = self.server_time
        self._index = f"{namespace}:keys"
        self._owns_client = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        namespace: str = "retryctl:breaker",
        timeout_s: float = 5.0,
        **client_kwargs: Any,
    ) -> RedisBreakerStore:
        """A store on a new client for ``url`` (``redis://host:port/db``); :meth:`close` closes it.

        ``timeout_s`` bounds connecting and each reply, so a worker whose Redis went away fails
        instead of hanging; ``client_kwargs`` go to ``redis.Redis.from_url``.
        """
        client_kwargs.setdefault("socket_timeout", timeout_s)
        client_kwargs.setdefault("socket_connect_timeout", timeout_s)
        store = cls(redis.Redis.from_url(url, **client_kwargs), namespace=namespace)
        store._owns_client = True
        return store

    def _record_key(self, key: str) -> str:
        return f"{self.namespace}:rec:{key}"

    def _where(self) -> str:
        """The server, as ``redis://host:port/db`` (never the password)."""
        kwargs = self.client.connection_pool.connection_kwargs
        if "path" in kwargs:
            return f"unix://{kwargs['path']}"
        return f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"

    @contextlib.contextmanager
    def _faults(self, operation: str) -> Iterator[None]:
        """Turn the client's errors (connection refused, timeout, the server gone) into
        :class:`BreakerStoreError`. A lost ``WATCH`` race is not one: :meth:`update` handles it."""
        try:
            yield
        except redis.WatchError:
            raise
        except redis.RedisError as exc:
            raise BreakerStoreError(store=self._where(), operation=operation, problem=summary(exc)) from exc

    def server_time(self) -> float:
        """The Redis server's wall time in seconds: the clock every worker shares."""
        with self._faults("clock"):
            seconds, micros = self.client.time()
        return seconds + micros / 1_000_000

    def update(self, key: str, fn: Update[T]) -> T:
        """Apply ``fn`` in an optimistic transaction, again if another client wrote ``key`` meanwhile."""
        name = self._record_key(key)
        with self._faults("update"), self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(name)  # type: ignore[no-untyped-call]  # untyped in redis-py
                    raw = pipe.hgetall(name)  # immediate: the pipeline is WATCHing, not yet queueing
                    before = _decode(raw)
                    record, result = fn(before)
                    pipe.multi()
                    if record != before or not raw:
                        pipe.delete(name)  # drops the fields that became None
                        pipe.hset(name, mapping=_encode(record))
                        pipe.sadd(self._index, key)
                    # An empty EXEC still fails if the record changed: a read-only result is never
                    # computed from a record another worker had already replaced.
                    pipe.execute()
                    return result
                except redis.WatchError:
                    continue

    def get(self, key: str) -> BreakerRecord:
        """``key``'s record (closed if never written)."""
        with self._faults("get"):
            return _decode(self.client.hgetall(self._record_key(key)))

    def items(self) -> dict[str, BreakerRecord]:
        """Every record by key."""
        with self._faults("items"):
            keys = sorted(_text(k) for k in self.client.smembers(self._index))
            pipe = self.client.pipeline(transaction=True)
            for key in keys:
                pipe.hgetall(self._record_key(key))
            raws: list[dict[bytes | str, bytes | str]] = pipe.execute()
        # A key reset between the two reads has an empty hash: it is gone, not closed.
        return {key: _decode(raw) for key, raw in zip(keys, raws, strict=True) if raw}

    def reset(self, key: str | None = None) -> None:
        """Forget ``key`` or every key of this namespace."""
        with self._faults("reset"):
            self._reset(key)

    def _reset(self, key: str | None) -> None:
        if key is not None:
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(self._record_key(key))
            pipe.srem(self._index, key)
            pipe.execute()
            return

        def clear(pipe: Pipeline) -> None:
            # WATCHing the key set means a key added while we read it makes us read again.
            names = [self._record_key(_text(k)) for k in pipe.smembers(self._index)]
            pipe.multi()
            pipe.delete(self._index, *names)

        self.client.transaction(clear, self._index)

    def close(self) -> None:
        """Close the client if :meth:`from_url` made it; the server keeps the state."""
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> RedisBreakerStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
