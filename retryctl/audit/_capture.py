"""A decision log kept in memory: what a batch worker's graph writes, handed to the driver to append.

A worker on a cluster must not write the batch's log file: it may be on another machine, and the chain
and exactly-once live with the single writer, the driver. So the worker builds its graph with a
:class:`CapturedLog`, a :class:`~retryctl.audit.DecisionLog` whose sink keeps records in memory, bucketed
by ``run_id`` (a batch task's id), and after each task hands its records to the driver
(:meth:`CapturedLog.take`), which appends them with :meth:`~retryctl.audit.DecisionLog.append_record`.
Records are built and checked exactly as for a file (the same pipeline, the same bytes); only the
chain fields are the driver's.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from typing import Any

from retryctl.audit._canonical import GENESIS_HASH, encode_line, hash_last
from retryctl.audit._sink import ChainSink
from retryctl.audit._writer import DecisionLog

__all__ = ["CapturedLog"]

_MEMORY = "<memory>"


class _MemorySink(ChainSink):
    """The writer's sink without a file: each record body kept, chained only for its returned hash."""

    def __init__(self) -> None:  # no file to open: ChainSink's __init__ is not run
        self.path = _MEMORY
        self.fsync = False
        self.repair = False
        self.repaired_bytes = 0
        self._lock = threading.Lock()
        self._head = GENESIS_HASH
        self._open_ = True
        self.records: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return not self._open_

    def msg(self, record: dict[str, Any], *, validated: bool = False) -> dict[str, Any]:
        """Keep ``record``; return it with a ``prev_hash`` and ``hash`` (of this memory chain)."""
        if "prev_hash" in record or "hash" in record:
            raise ValueError("'prev_hash' and 'hash' are set by the sink; a processor must not set them")
        with self._lock:
            self._check_open()
            self._keep(dict(record))
            body = {**record, "prev_hash": self._head}
            # The hash of this memory chain (a span may carry it); the driver's log chains anew.
            _, self._head = encode_line(body, validated=validated)
            return {**body, "hash": self._head}

    def msg_around_head(self, before: bytes, after: bytes) -> str:
        """Keep the record whose canonical bytes are ``before + prev_hash + after``; return its hash."""
        with self._lock:
            head = self._head
        line, digest = hash_last(before + head.encode() + after)
        body = json.loads(line)
        del body["prev_hash"], body["hash"]
        with self._lock:
            self._check_open()
            self._keep(body)
            self._head = digest
        return digest

    def close(self) -> None:
        """Stop keeping records. Idempotent."""
        self._open_ = False

    def _check_open(self) -> None:
        if not self._open_:
            raise ValueError("captured decision log is closed")

    def _keep(self, body: dict[str, Any]) -> None:
        self.records[str(body.get("run_id", ""))].append(body)


class CapturedLog(DecisionLog):
    """A :class:`~retryctl.audit.DecisionLog` whose records stay in memory, by ``run_id``, until taken."""

    def __init__(self) -> None:
        super().__init__(_MEMORY)

    def _open_sink(self, path: str, *, fsync: bool, repair: bool) -> ChainSink:
        self._memory = _MemorySink()
        return self._memory

    def take(self, run_id: str) -> list[dict[str, Any]]:
        """Remove and return the records of ``run_id`` (without chain fields), in the order written."""
        with self._memory._lock:
            return self._memory.records.pop(run_id, [])

    def take_all(self) -> list[dict[str, Any]]:
        """Remove and return every record kept, run by run (records of a run in the order written)."""
        with self._memory._lock:
            runs, self._memory.records = self._memory.records, defaultdict(list)
        return [record for records in runs.values() for record in records]
