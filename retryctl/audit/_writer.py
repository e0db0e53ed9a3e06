"""``DecisionLog``: the writer, a structlog processor pipeline ending in the hash-chaining JSONL sink.

The pipeline over each event dict is::

    add schema → timestamp "ts" → *your processors* → EventRenamer("kind") → validate → ChainSink.msg

Timestamps come from structlog's own ``TimeStamper(fmt="iso", key="ts")`` unless a ``clock`` is
injected (tests, replays), in which case the same ISO format is built from that clock's seconds.
Your processors see the event name (``"verdict"`` or ``"summary"``) under structlog's usual ``event``
key and may add keys; they may not drop a record (a decision log keeps every verdict) nor set the
chain fields. Validation against the record models runs after them, so a processor cannot break the
schema unnoticed.

A log with no processors of yours writes a verdict without the pipeline: the body is built from the
verdict's fields and checked value by value as the model would check it (``_fastbody``); the bytes
are the same, and whatever that check cannot vouch for goes through the pipeline above.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import structlog
from pydantic import ConfigDict, JsonValue, TypeAdapter
from structlog.processors import EventRenamer, TimeStamper
from structlog.typing import EventDict, Processor, WrappedLogger

from retryctl.audit._fastbody import verdict_body
from retryctl.audit._records import (
    BODY_MODELS,
    SCHEMA_VERSION,
    summary_fields,
    verdict_fields,
)
from retryctl.audit._sink import ChainSink
from retryctl.audit._verdict_line import VerdictLine, utc_now_iso
from retryctl.controller import Clock, Verdict
from retryctl.exceptions import ConfigError

__all__ = ["DecisionLog"]

_PIPELINE_KINDS = ("verdict", "summary")
_LINES_KEPT = 64
"""Verdicts a log keeps the encoded line of (:meth:`DecisionLog.append_verdict`)."""
_EXTRA_KEYS: TypeAdapter[dict[str, JsonValue]] = TypeAdapter(
    dict[str, JsonValue], config=ConfigDict(allow_inf_nan=False, title="record keys added by processors")
)


def _add_schema(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    event_dict["schema"] = SCHEMA_VERSION
    return event_dict


def _not_utf8(fields: dict[str, Any], exc: UnicodeEncodeError) -> ConfigError:
    bad = exc.object[exc.start : exc.end]
    problem = "holds a lone surrogate, which UTF-8 (the log's encoding) cannot carry"
    for key, value in fields.items():
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            return ConfigError(field=key, value=bad, problem=problem)
    return ConfigError(field="record", value=bad, problem=problem)  # a processor's key


class _ClockStamper:
    """Writes ``ts`` from an injected clock (seconds since the epoch) in TimeStamper's ISO format."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def __call__(self, _logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
        moment = datetime.datetime.fromtimestamp(self.clock(), tz=datetime.UTC)
        event_dict["ts"] = moment.isoformat().replace("+00:00", "Z")
        return event_dict


def _validate(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> tuple[Any, ...]:
    """Last processor: check the record against its model and hand the sink one plain dict."""
    kind = event_dict.get("kind")
    if kind not in _PIPELINE_KINDS:
        raise ConfigError(field="kind", value=kind, problem="a processor changed the record kind")
    model = BODY_MODELS[kind].model_validate(event_dict)
    if model.model_extra:
        # Keys a processor added are not typed by the model: check them as JSON here, so that an
        # object() names its key (not a serialiser error) and NaN is refused, not written as null.
        _EXTRA_KEYS.validate_python(model.model_extra)
    body = model.model_dump(mode="json", by_alias=True)
    return ((body,), {"validated": True})


class DecisionLog:
    """Append-only, hash-chained JSONL log of verdicts, written through structlog.

    ``fsync=True`` makes each record durable before the call returns (slower; flushing alone
    survives a crash of the process, not of the machine). ``repair=True`` cuts a torn last line
    instead of raising, and records the cut (see :class:`ChainSink`). ``clock`` replaces the wall
    clock for timestamps. ``processors`` are extra structlog processors, run after the timestamp.

    Several processes and threads may write the same file at once: lines never interleave and the
    file stays one valid chain. A torn last line (another writer died mid-line) makes every write
    raise :class:`~retryctl.exceptions.LogIntegrityError` until a log opened with ``repair=True`` cuts
    it; a write that fails (``ENOSPC``) raises ``OSError`` and leaves the file as it was, and the next
    write re-reads the tail before appending. Only a regular file can be a log (a FIFO or a device is
    a :class:`~retryctl.exceptions.UsageError`). Timestamps are taken before the file lock, so with concurrent
    writers ``ts`` can step back slightly from one line to the next; the file order is the chain's.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = False,
        repair: bool = False,
        clock: Clock | None = None,
        processors: Sequence[Processor] = (),
    ) -> None:
        for i, proc in enumerate(processors):
            if not callable(proc):
                raise ConfigError(field=f"processors[{i}]", value=proc, problem="not callable")
        self._stamp: TimeStamper | _ClockStamper = (
            TimeStamper(fmt="iso", utc=True, key="ts") if clock is None else _ClockStamper(clock)
        )
        # The timestamp of a record written without the pipeline (and of a repair): the stamper's
        # own text, read without a dict and a processor call when it is structlog's.
        self._now: Callable[[], str] = utc_now_iso if clock is None else self._stamped_now
        self._sink = self._open_sink(os.fspath(path), fsync=fsync, repair=repair)
        # With no processor of yours, nothing can change a verdict's body between the verdict and the
        # model check, so a body built and checked without pydantic may go straight to the sink.
        self._direct = not processors
        # By verdict identity: the verdict (held, so its id is not reused) and its line once it has
        # been seen twice (None before: a verdict logged once is not worth a line).
        self._lines: dict[int, tuple[Verdict, VerdictLine | Literal[False] | None]] = {}
        chain: list[Processor] = [
            _add_schema,
            self._stamp,
            *processors,
            EventRenamer("kind"),
            _validate,
        ]
        # Everything is passed explicitly so that structlog's global configuration plays no part.
        self._log: Any = structlog.wrap_logger(
            self._sink,
            processors=chain,
            wrapper_class=structlog.BoundLogger,
            context_class=dict,
            cache_logger_on_first_use=True,
        ).bind()

    def _open_sink(self, path: str, *, fsync: bool, repair: bool) -> ChainSink:
        # A seam for a log kept in memory (retryctl.audit._capture: a batch worker's records).
        return ChainSink(path, fsync=fsync, repair=repair, now=self._now)

    @property
    def path(self) -> str:
        """The log file."""
        return self._sink.path

    @property
    def repaired_bytes(self) -> int:
        """Torn bytes this log cut (``repair=True``), each cut recorded by a ``repair`` record; 0: none."""
        return self._sink.repaired_bytes

    @property
    def head(self) -> str:
        """The hash of the last record written or seen; keep it elsewhere to anchor a later audit."""
        return self._sink.head

    def record_verdict(
        self,
        verdict: Verdict,
        *,
        run_id: str,
        step_id: str,
        attempt: int,
        candidates_summary: Any,
        latency_ms: float,
        target: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Append one verdict record; return it as written (with ``ts``, ``prev_hash``, ``hash``).

        ``target`` names the tool or model that acted; the verdict's ``switch_to`` where it goes next.
        """
        given: dict[str, Any] = {
            "run_id": run_id,
            "step_id": step_id,
            "attempt": attempt,
            "candidates_summary": candidates_summary,
            "latency_ms": latency_ms,
            "target": target,
            "extra": extra,
        }
        if self._direct:
            body = verdict_body(verdict, **given)
            if body is not None:
                body["ts"] = self._now()
                try:
                    return self._sink.msg(body, validated=True)
                except UnicodeEncodeError:
                    pass  # checked for, so not expected; nothing was written: the pipeline names it
        return self._emit("verdict", verdict_fields(verdict, **given))

    def append_verdict(
        self,
        verdict: Verdict,
        *,
        run_id: str,
        step_id: str,
        attempt: int,
        candidates_summary: Any,
        latency_ms: float,
        target: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """Append one verdict record as :meth:`record_verdict` does (the same bytes, the same errors),
        handing back only its ``hash`` (a trace span carries it): what the drivers call for each verdict.

        A verdict logged again (the attempt engine hands out the same verdict object for the same
        plain outcome) is encoded once: its later records only fill in the call's fields
        (:class:`~retryctl.audit._fastbody.VerdictLine`).
        """
        if self._direct:
            line = self._line_of(verdict)
            if line is not None:
                parts = line.fill(
                    self._now,
                    run_id=run_id,
                    step_id=step_id,
                    attempt=attempt,
                    candidates_summary=candidates_summary,
                    latency_ms=latency_ms,
                    target=target,
                    extra=extra,
                )
                if parts is not None:
                    return self._sink.msg_around_head(*parts)
        written = self.record_verdict(
            verdict,
            run_id=run_id,
            step_id=step_id,
            attempt=attempt,
            candidates_summary=candidates_summary,
            latency_ms=latency_ms,
            target=target,
            extra=extra,
        )
        return str(written["hash"])

    def _line_of(self, verdict: Verdict) -> VerdictLine | None:
        held = self._lines.get(id(verdict))
        if held is None or held[0] is not verdict:
            if len(self._lines) >= _LINES_KEPT:
                self._lines.clear()
            self._lines[id(verdict)] = (verdict, None)
            return None
        line = held[1]
        if line is None:
            # Seen again: make its line (False: a verdict the fast path does not take, kept as such).
            line = VerdictLine.of(verdict) or False
            self._lines[id(verdict)] = (verdict, line)
        # A verdict is frozen but its evidence holds dicts: one changed since is encoded afresh.
        return line if line and line.matches(verdict) else None

    def record_summary(
        self,
        *,
        run_id: str,
        step_id: str,
        final_answer: str | None,
        sampling_history: list[Any],
        budget_used: dict[str, float],
        budget_max: dict[str, float | None],
        estimated_difficulty: float | str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Append one per-question summary record; return it as written."""
        fields = summary_fields(
            run_id=run_id,
            step_id=step_id,
            final_answer=final_answer,
            sampling_history=sampling_history,
            budget_used=budget_used,
            budget_max=budget_max,
            estimated_difficulty=estimated_difficulty,
            extra=extra,
        )
        return self._emit("summary", fields)

    def append_record(self, record: Mapping[str, Any]) -> str:
        """Chain one record made by another writer onto this log; return its new ``hash``.

        The record (a ``verdict`` or ``summary``, as a batch worker's captured log holds it) is checked
        against its model and written with this log's ``prev_hash``; a ``prev_hash``/``hash`` it carries
        from elsewhere is dropped. What the record says (``ts``, ``run_id``...) is kept as it was made.
        """
        body = {k: v for k, v in record.items() if k not in ("prev_hash", "hash")}
        kind = body.get("kind")
        if kind not in _PIPELINE_KINDS:
            raise ConfigError(
                field="kind", value=kind, problem="only verdict and summary records are appended"
            )
        model = BODY_MODELS[kind].model_validate(body)
        if model.model_extra:
            _EXTRA_KEYS.validate_python(model.model_extra)
        return str(self._sink.msg(model.model_dump(mode="json", by_alias=True), validated=True)["hash"])

    def close(self) -> None:
        """Close the file. Idempotent."""
        self._sink.close()

    def __enter__(self) -> DecisionLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._sink.closed else f"head={self.head[:12]}"
        return f"DecisionLog({self.path!r}, {state})"

    def _emit(self, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
        try:
            written = self._log.msg(kind, **fields)
        except UnicodeEncodeError as exc:
            # A lone surrogate ("\ud800", e.g. from a JSON escape in a model's output) passes
            # pydantic's str check but not the UTF-8 encoding; nothing was written. Name the field.
            raise _not_utf8(fields, exc) from None
        if written is None:
            # structlog turns DropEvent into a silent no-op; an audit log must not lose a verdict.
            raise ConfigError(
                field="processors",
                value=kind,
                problem="a processor dropped the record (DropEvent); a decision log keeps every record",
            )
        result: dict[str, Any] = written
        return result

    def _stamped_now(self) -> str:
        stamped = self._stamp(None, "repair", {})
        return str(stamped["ts"])
