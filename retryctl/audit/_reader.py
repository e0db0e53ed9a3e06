"""Reading a decision log back, and proving its chain intact.

``verify_log`` streams the file once and stops at the first problem, which it names by line and
record. For a line laid out as the writer lays it out (see ``_canonical``), it checks the hash on the
raw bytes and finds ``prev_hash``, ``schema`` and ``run_id`` by byte search (the writer uses that
layout only where those keys occur once, so a nested key of the same name cannot be mistaken for the
top-level one). Anything else takes the slow path: parse, re-serialise canonically, hash, and say
precisely what is wrong. Checking 1,000,000 records this way is measured by
``bench/audit_verify.py``. :func:`check_chain` is the same walk for lines a caller reads itself
(``retryctl audit`` reads each line once, to fold it and to check it), and can take the links from
the caller's own decoding of the lines instead of searching the bytes for them.

What a chain proves: no record was edited, dropped, reordered, duplicated or inserted *between* the
genesis and the last record. Cutting whole records off the end leaves a shorter valid chain; to catch
that, keep :attr:`DecisionLog.head` (or ``VerifyReport.head``) somewhere else and pass it back as
``anchor``. Anyone able to rewrite the file can also recompute every hash: the chain proves integrity
against accidents and naive edits, and against deliberate ones only together with an anchor kept
out of their reach.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, NamedTuple, Protocol

from retryctl._paths import open_regular
from retryctl.audit._canonical import (
    GENESIS_HASH,
    HASH_PREFIX,
    HASH_RE,
    HASH_SUFFIX_LEN,
    PREV_KEY,
    RUN_KEY,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    loads_strict,
    record_hash,
)
from retryctl.exceptions import LogIntegrityError

if TYPE_CHECKING:
    from retryctl.audit._records import RepairRecord, SummaryRecord, VerdictRecord

__all__ = [
    "ChainScan",
    "DecodedLinks",
    "VerifyReport",
    "check_chain",
    "read_records",
    "settled_size",
    "verify_log",
]

# The hash-last layout (``,"hash":"<64 hex>"}\n`` at the end of a line) is defined in ``_canonical``,
# beside the writer's encoder; only its names are imported here.
_PREV_Q = PREV_KEY + b'"'
_QUOTE = ord('"')
_SCHEMA_1 = SCHEMA_KEY + str(SCHEMA_VERSION).encode() + b","
_EMPTY_RUN = RUN_KEY + b'""'
_READ_BUFFER = 1 << 20
_TORN = "torn tail: the last line has no newline (a write was cut short)"


@dataclass(frozen=True, kw_only=True)
class VerifyReport:
    """The outcome of :func:`verify_log`."""

    path: str
    """The log verified."""
    ok: bool
    """Whether the whole file is one intact chain (and contains ``anchor``, if one was given)."""
    records: int
    """How many records verified, from the first up to the first problem (all of them when ok)."""
    runs: int
    """How many distinct ``run_id`` values those records carry."""
    head: str
    """The hash of the last record that verified (the genesis hash for an empty log)."""
    error: LogIntegrityError | None = None
    """The first problem, naming its line and record; ``None`` when ok."""

    def __str__(self) -> str:
        if self.error is not None:
            return f"BROKEN: {self.error}"
        runs = "1 run" if self.runs == 1 else f"{self.runs} runs"
        records = "1 record" if self.records == 1 else f"{self.records} records"
        return f"{self.path}: ok, {records} in {runs}"

    def raise_for_error(self) -> None:
        """Raise :attr:`error` if there is one."""
        if self.error is not None:
            raise self.error


def _short(digest: str) -> str:
    return digest[:12] + "…"


def _slow_check(line: bytes) -> tuple[str, str, str | None] | str:
    """``(prev_hash, hash, run_id)`` of a line, or the problem with it."""
    if line.strip() == b"":
        return "bad JSON: empty line"
    try:
        obj = loads_strict(line)
    except ValueError as exc:
        return f"bad JSON: {exc}"
    if not isinstance(obj, dict):
        return "bad JSON: the line is not a JSON object"
    schema = obj.get("schema")
    if schema != SCHEMA_VERSION or isinstance(schema, bool):
        return f"unknown schema {schema!r} (this reader knows {SCHEMA_VERSION})"
    stored = obj.get("hash")
    if not isinstance(stored, str) or not HASH_RE.fullmatch(stored):
        return "no valid 'hash' field"
    computed = record_hash(obj)
    if computed != stored:
        return (
            "hash mismatch: the record was edited after it was written "
            f"(stored {_short(stored)}, content hashes to {_short(computed)})"
        )
    prev = obj.get("prev_hash")
    if not isinstance(prev, str):
        return "no valid 'prev_hash' field"
    run = obj.get("run_id")
    return prev, stored, run if isinstance(run, str) else None


def verify_log(path: str | os.PathLike[str], *, anchor: str | None = None) -> VerifyReport:
    """Check the whole hash chain of ``path``; report the first problem instead of raising.

    ``anchor`` is a hash recorded earlier (e.g. :attr:`DecisionLog.head`): the log must still contain
    a record with that hash, which catches records cut off the end. A live log may be verified while
    writers append: a line still being written when the scan reaches it is left for next time
    rather than reported as torn.
    """
    name = os.fspath(path)
    with _open_log(name) as f:
        settled = settled_size(f.fileno())
        scan = _scan(f, anchor)
        if scan.torn and f.tell() - scan.torn >= settled:
            # The partial line began after the moment no writer was mid-line: an append in flight.
            scan = scan._replace(problem=None)
    problem = scan.problem
    if problem is None and not scan.seen_anchor:
        problem = (
            f"anchor {_short(anchor or '')} not found: records were cut off the end of the log "
            "(or the anchor belongs to another log)"
        )
    error = None
    if problem is not None:
        error = LogIntegrityError(path=name, line=scan.records + 1, index=scan.records, problem=problem)
    return VerifyReport(
        path=name,
        ok=error is None,
        records=scan.records,
        runs=scan.runs,
        head=scan.head,
        error=error,
    )


def settled_size(fd: int) -> int:
    """The file size at a moment when no writer is mid-line (writers hold LOCK_EX per line)."""
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        return os.fstat(fd).st_size
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


class ChainScan(NamedTuple):
    """How far a walk along the chain got (:func:`check_chain`)."""

    problem: str | None
    """The first problem, worded as :func:`verify_log` words it; ``None`` when every line linked."""
    records: int
    """The index of the line after the last one that verified (the start index plus the lines verified)."""
    head: str
    """The hash of the last line that verified (the hash the walk started after, if none did)."""
    runs: int
    """How many distinct runs :attr:`run_keys` holds."""
    seen_anchor: bool
    """Whether the anchor was met (always true without one)."""
    torn: int
    """Length of a last line without a newline (0 if none)."""
    run_keys: set[bytes]
    """The distinct runs, each as its JSON-encoded id."""


class DecodedLinks(Protocol):
    """The top-level fields of a line that a caller already decoded (for :func:`check_chain`)."""

    @property
    def prev_hash(self) -> object: ...
    @property
    def schema(self) -> object: ...
    @property
    def hash(self) -> object: ...
    @property
    def run_id(self) -> object:
        """The run id, ``""`` when the line has none (an empty id is told apart by the bytes)."""
        ...


def check_chain(
    lines: Iterable[bytes],
    *,
    after: str = GENESIS_HASH,
    index: int = 0,
    run_keys: set[bytes] | None = None,
    decoded: Sequence[DecodedLinks | None] | None = None,
) -> ChainScan:
    """Walk the chain over ``lines`` (each with its newline) up to the first problem.

    This is :func:`verify_log`'s own check, for a caller that reads the lines itself, or reads a log
    in parts: ``after`` is the hash the first line must link to (its ``prev_hash``), ``index`` that
    line's 0-based index in the log (a problem at index 0 is worded against the genesis hash), and
    ``run_keys``, if given, is the set of runs seen so far, which the walk adds to. To go on where a
    walk stopped without a problem, pass its :attr:`ChainScan.head`, :attr:`ChainScan.records` and
    :attr:`ChainScan.run_keys`.

    ``decoded``, one entry per line, gives the line's top-level fields when the caller has decoded
    them anyway (``None`` for a line it could not): a line of the writer's hash-last layout is then
    settled by its decoded links and the hash of its bytes, without searching the bytes for them,
    and any other line by the exact walk, as without ``decoded``. ``retryctl audit`` checks a large
    log this way, batch by batch, while it folds the same records (:mod:`retryctl.report._scan`).
    """
    if decoded is None:
        return _scan(lines, None, expected_hash=after, start_index=index, run_keys=run_keys)
    return _scan_decoded(lines, decoded, after, index, set() if run_keys is None else run_keys)


def _scan_decoded(
    lines: Iterable[bytes], decoded: Sequence[DecodedLinks | None], after: str, index: int, runs: set[bytes]
) -> ChainScan:
    """:func:`check_chain` with the lines' fields decoded by the caller: ``_scan``'s walk, a writer's
    line settled by the hash of its bytes and its decoded links instead of byte searches."""
    sha256 = hashlib.sha256
    expected = after
    last_run: object = None
    for line, rec in zip(lines, decoded, strict=True):
        if rec is not None:
            cut = len(line) - HASH_SUFFIX_LEN
            schema = rec.schema
            if (
                cut > 0
                and rec.prev_hash == expected
                and line.startswith(HASH_PREFIX, cut)
                and line.endswith(b'"}\n')
                and type(schema) is int
                and schema == SCHEMA_VERSION
            ):
                computed = sha256(line[:cut] + b"}").hexdigest()
                if rec.hash == computed:
                    expected = computed
                    index += 1
                    run = rec.run_id
                    if run != last_run and isinstance(run, str) and (run or _EMPTY_RUN in line):
                        runs.add(_run_key(run))
                        last_run = run
                    continue
        # Not settled by its fields (another layout, a damaged line...): the exact walk, for this line.
        scan = _scan((line,), None, expected_hash=expected, start_index=index, run_keys=runs)
        if scan.problem is not None:
            return scan
        expected = scan.head
        index += 1
        last_run = None
    return ChainScan(None, index, expected, len(runs), True, 0, runs)


def _run_key(run: str) -> bytes:
    """A run id JSON-encoded, as the canonical line spells it (the key ``_scan`` keeps for it)."""
    if run.isascii() and run.isprintable() and '"' not in run and "\\" not in run:
        return b'"' + run.encode() + b'"'  # nothing to escape: what json.dumps writes, sooner
    return json.dumps(run, ensure_ascii=False).encode()


def _slow_link(line: bytes, expected: bytes, index: int) -> tuple[bytes, bytes | None] | str:
    """``(hash, JSON-encoded run_id)`` of a line checked by parsing, or the problem with it."""
    slow = _slow_check(line)
    if isinstance(slow, str):
        return slow
    prev, stored, run = slow
    if prev.encode() != expected:
        was = "the genesis hash" if index == 0 else _short(expected.decode())
        return (
            f"prev_hash mismatch: expected {was}, found {_short(prev)}; "
            "a record before this one was dropped, reordered or inserted"
        )
    return stored.encode(), None if run is None else json.dumps(run, ensure_ascii=False).encode()


def _scan(
    lines: Iterable[bytes],
    anchor: str | None,
    *,
    expected_hash: str = GENESIS_HASH,
    start_index: int = 0,
    run_keys: set[bytes] | None = None,
) -> ChainScan:
    """Walk the chain up to the first problem (see :func:`check_chain`; ``anchor`` as in
    :func:`verify_log`)."""
    # Everything here is a local variable on purpose: this loop runs once per record.
    sha256 = hashlib.sha256
    prefix_len = len(HASH_PREFIX)
    expected = expected_hash.encode()
    # A run is kept as its JSON-encoded id (quotes included), the same bytes on both paths.
    runs: set[bytes] = set() if run_keys is None else run_keys
    last_run_key = b"\x00"  # matches nothing until the first run is seen
    anchor_b = None if anchor is None else anchor.encode()
    seen_anchor = anchor is None
    index = start_index
    problem: str | None = None
    torn = 0
    for line in lines:
        # Fast path: a hash-last line (see _canonical) whose bytes hash to its stored hash, that
        # links to the expected hash and is schema 1. Keys are sorted (prev_hash < run_id < schema)
        # and each occurs once in this layout, so the searches can start at prev_hash.
        fast = False
        cut = len(line) - HASH_SUFFIX_LEN
        if cut > 0 and line.startswith(HASH_PREFIX, cut):
            computed = sha256(line[:cut] + b"}").hexdigest().encode()
            if line.startswith(computed, cut + prefix_len) and line.endswith(b'"}\n'):
                at = line.find(_PREV_Q + expected + b'"', 0, cut)
                if at >= 0 and line.find(_SCHEMA_1, at, cut) >= 0:
                    # Most records belong to the same run as the one before: one search settles it.
                    if line.find(last_run_key, at, cut) >= 0:
                        fast = True
                    else:
                        r = line.find(RUN_KEY, at, cut)
                        if r < 0:
                            fast = True
                        elif line[r + 9] == _QUOTE:
                            run = line[r + 9 : line.find(b'"', r + 10, cut) + 1]
                            if b"\\" not in run:
                                fast = True
                                runs.add(run)
                                last_run_key = RUN_KEY + run
            if fast:
                stored = computed
        if not fast:
            if not line.endswith(b"\n"):
                problem = _TORN
                torn = len(line)
                break
            slow = _slow_link(line, expected, index)
            if isinstance(slow, str):
                problem = slow
                break
            stored, slow_run = slow
            if slow_run is not None:
                runs.add(slow_run)
                last_run_key = RUN_KEY + slow_run
        if not seen_anchor and stored == anchor_b:
            seen_anchor = True
        expected = stored
        index += 1
    return ChainScan(problem, index, expected.decode(), len(runs), seen_anchor, torn, runs)


def _tag(obj: object) -> str | None:
    kind = obj.get("kind") if isinstance(obj, dict) else None
    return kind if isinstance(kind, str) else None


def _open_log(name: str) -> BinaryIO:
    """The log for reading; a FIFO or device is refused without blocking (``open_regular``)."""
    return open(open_regular(name, os.O_RDONLY, what="decision log"), "rb", buffering=_READ_BUFFER)


def read_records(
    path: str | os.PathLike[str],
) -> Iterator[VerdictRecord | SummaryRecord | RepairRecord]:
    """Yield every record of ``path`` as its typed model, in file order.

    This parses and validates each record but does not check the chain: call :func:`verify_log`
    for that. A line that cannot be read as a record raises
    :class:`~retryctl.exceptions.LogIntegrityError` naming it.
    """
    # Imported here, not at the top: the record models (pydantic, retryctl.controller) take ~0.2 s to
    # import, and verify_log, all that `retryctl audit` needs of this module, does not use them.
    from pydantic import ValidationError

    from retryctl.audit._records import describe_errors, parse_record

    name = os.fspath(path)
    with _open_log(name) as f:
        settled = settled_size(f.fileno())
        offset = 0
        for index, line in enumerate(f):

            def fail(problem: str, index: int = index) -> LogIntegrityError:
                return LogIntegrityError(path=name, line=index + 1, index=index, problem=problem)

            if not line.endswith(b"\n"):
                if offset >= settled:
                    return  # an append still in flight, not a torn line
                raise fail(_TORN)
            offset += len(line)
            try:
                obj = loads_strict(line)
            except ValueError as exc:
                raise fail(f"bad JSON: {exc}") from exc
            if isinstance(obj, dict) and obj.get("schema") != SCHEMA_VERSION:
                raise fail(f"unknown schema {obj.get('schema')!r} (this reader knows {SCHEMA_VERSION})")
            try:
                record = parse_record(obj)
            except ValidationError as exc:
                raise fail(f"not a valid record: {describe_errors(exc, tag=_tag(obj))}") from None
            yield record
