"""Canonical JSON and the hash chain's line format, shared by the writer and the verifier.

A record's hash is ``sha256`` of its canonical JSON *without* the ``hash`` key: keys sorted, no spaces,
UTF-8 (no ``\\u`` escapes for non-ASCII), finite numbers only. The hash is defined by content: any
tool that parses a line, drops ``hash`` and re-serialises canonically gets the same bytes to hash.

The writer lays a line out in one of two ways, both valid JSON objects with the same content:

- **hash last** (the usual case): the canonical body followed by the hash,
  ``{...canonical body...,"hash":"<64 hex>"}``. The writer uses it only when the keys
  ``"prev_hash":``, ``"schema":`` and ``"run_id":`` each occur in the body's bytes exactly as often
  as at top level (once; ``run_id`` zero times in records without one), so a verifier can check
  the hash on the raw bytes and find those fields by byte search without parsing;
- **sorted** (when a nested value reuses one of those key names): the canonical JSON of the whole
  record, ``hash`` in its sorted place. A verifier parses such lines.

The canonical bytes are defined by Python's ``json.dumps`` (see :func:`canonical_bytes`). The writer
may produce them with orjson, which is several times faster and writes the same bytes for JSON values
except some floats: it spells ``1e-05`` as ``0.00001`` and ``1e-07`` as ``1e-7``. A line whose orjson
bytes may hold such a float in a number (see ``may_differ``; the same bytes in a string do not
count), or that orjson refuses (a big integer, a lone surrogate, a non-``str`` key, a ``str``
subclass), is encoded by ``json.dumps`` instead. orjson writes
NaN as ``null`` where ``json.dumps`` refuses it, so the fast path is only for bodies a record model
has validated (finite numbers only).
``tests/audit/test_sink.py`` checks byte-identity on generated records.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
from collections.abc import Callable
from typing import Any, cast

import orjson

__all__ = [
    "GENESIS_HASH",
    "HASH_PREFIX",
    "HASH_RE",
    "HASH_SUFFIX_LEN",
    "ORJSON_OPTIONS",
    "PREV_KEY",
    "RUN_KEY",
    "SCHEMA_KEY",
    "SCHEMA_VERSION",
    "canonical_bytes",
    "encode_line",
    "fast_canonical_bytes",
    "fast_line_hash",
    "hash_last",
    "loads_strict",
    "may_differ",
    "record_hash",
]

SCHEMA_VERSION = 1
"""The version written in every record's ``schema`` field; bumped on any incompatible change."""
# Defined here, not in ``_records`` (which re-exports it), so that the verifier can check it without
# importing pydantic and the record models.

GENESIS_HASH = "0" * 64
"""The ``prev_hash`` of the first record of a log."""

HASH_RE = re.compile(r"[0-9a-f]{64}")
"""A record hash: 64 lower-case hex digits."""

PREV_KEY = b'"prev_hash":'
"""The bytes of the top-level ``prev_hash`` key."""
SCHEMA_KEY = b'"schema":'
"""The bytes of the top-level ``schema`` key."""
RUN_KEY = b'"run_id":'
"""The bytes of the top-level ``run_id`` key."""


def _builtin_sha256() -> Callable[[bytes], Any]:
    """CPython's own SHA-256 (hashlib's fallback; ``_sha256`` until 3.11, ``_sha2`` since), else
    hashlib's. The digest is the same as OpenSSL's. For one line of a record, hashed between other
    work, it is the cheaper: OpenSSL 3's setup per digest (fetching the algorithm) outweighs its faster
    rounds on a ~1 KB line (in ``bench/controller_overhead.py``: about 8 against 13 us a record inside
    a run, and fewer instructions under cachegrind). The reader, which hashes many lines, keeps
    hashlib's."""
    for name in ("_sha256", "_sha2"):
        try:
            return cast("Callable[[bytes], Any]", importlib.import_module(name).sha256)
        except (ImportError, AttributeError):  # pragma: no cover - another Python
            continue
    return hashlib.sha256  # pragma: no cover


_line_sha256 = _builtin_sha256()

HASH_PREFIX = b',"hash":"'
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# ``json.dumps`` with these arguments builds exactly this encoder on each call.
ORJSON_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_SUBCLASS  # str/int subclasses (enums...): json.dumps' own rules apply
    | orjson.OPT_PASSTHROUGH_DATETIME  # not JSON: json.dumps refuses them
    | orjson.OPT_PASSTHROUGH_DATACLASS
)
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
HASH_SUFFIX_LEN = len(HASH_PREFIX) + 64 + len(b'"}\n')


def canonical_bytes(obj: dict[str, Any]) -> bytes:
    """The canonical JSON of ``obj`` as UTF-8 bytes (sorted keys, compact, finite numbers only)."""
    return _ENCODER.encode(obj).encode()


def fast_canonical_bytes(obj: dict[str, Any]) -> bytes:
    """:func:`canonical_bytes` for a validated body (JSON values, finite numbers): orjson's bytes
    when they provably match, else ``json.dumps``'s."""
    try:
        raw = orjson.dumps(obj, option=ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: let json.dumps encode it, or raise its own error
        return canonical_bytes(obj)
    return canonical_bytes(obj) if may_differ(raw) else raw


def may_differ(raw: bytes) -> bool:
    """Whether orjson's ``raw`` may spell a float otherwise than ``float.__repr__`` (json.dumps).

    Both write the shortest digits that read back as the same float, and both write them positionally
    between 1e-4 and 1e16, where ``repr`` does. So a float can differ only where ``repr`` uses an
    exponent, and there orjson writes an exponent (a digit then ``e``), leading zeros (``0.0000``) or
    17 or more digits before the point. Each pattern counts only where it lies in a number (see
    :func:`_in_number`): strings often hold such bytes (``9e`` in a uuid, a hash or a tool-call id),
    and sending every record that names one to ``json.dumps`` would lose most of orjson's speed.
    """
    if _in_number(raw, b"0.0000"):
        return True
    zeros = raw.translate(_DIGITS_AS_ZERO)
    return _in_number(zeros, b"0e") or _in_number(zeros, b"0E") or b"00000000000000000." in zeros


_NUMBER_BYTES = frozenset(b"0123456789.-")
_BEFORE_VALUE = frozenset(b":,[")


def _in_number(raw: bytes, pattern: bytes) -> bool:
    """Whether ``pattern`` (which begins with a digit) occurs in ``raw`` inside a number.

    In compact JSON a number is a run of digits, ``.`` and ``-`` (its mantissa: the pattern starts
    there) right after ``:``, ``,`` or ``[``. Walking back from each occurrence over such bytes ends
    at one of those three for a number; inside a string it ends at another byte (a letter, the opening
    quote), unless the string itself reads like ``:0.00001`` there, which only costs the slow path.
    So no float that may differ is missed.
    """
    at = raw.find(pattern)
    while at >= 0:
        start = at
        while start > 0 and raw[start - 1] in _NUMBER_BYTES:
            start -= 1
        if start > 0 and raw[start - 1] in _BEFORE_VALUE:
            return True
        at = raw.find(pattern, at + 1)
    return False


def record_hash(record: dict[str, Any]) -> str:
    """The hash a record must carry: sha256 of its canonical JSON without the ``hash`` key."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def encode_line(body: dict[str, Any], *, validated: bool = False) -> tuple[bytes, str]:
    """The full line (newline included) for a record body that already has ``prev_hash``; and its hash.

    ``validated=True`` says a record model checked ``body`` (JSON values, finite numbers only), which
    allows the faster encoder (see the module docstring); the bytes are the same either way.
    """
    if "hash" in body:
        raise ValueError("a record body must not carry 'hash' before it is chained")
    raw = fast_canonical_bytes(body) if validated else canonical_bytes(body)
    unambiguous = (
        raw.count(PREV_KEY) == 1
        and raw.count(SCHEMA_KEY) == 1
        and raw.count(RUN_KEY) == (1 if "run_id" in body else 0)
    )
    if unambiguous:
        return hash_last(raw)
    digest = hashlib.sha256(raw).hexdigest()
    whole = {**body, "hash": digest}
    return (fast_canonical_bytes(whole) if validated else canonical_bytes(whole)) + b"\n", digest


def hash_last(raw: bytes) -> tuple[bytes, str]:
    """The line of the canonical body ``raw`` in the hash-last layout, and its hash. Only for a body
    whose ``prev_hash``, ``schema`` and ``run_id`` keys occur once in ``raw`` (see :func:`encode_line`)."""
    digest = _line_sha256(raw).hexdigest()
    return raw[:-1] + HASH_PREFIX + digest.encode() + b'"}\n', digest


def fast_line_hash(line: bytes) -> tuple[bytes, bytes] | None:
    """``(body, stored_hash)`` when ``line`` has the writer's layout and its hash matches its bytes.

    ``None`` means "not provably good by bytes alone": the caller must parse the line to find out why
    (or to accept a line another tool re-serialised without changing its content).
    """
    if len(line) <= HASH_SUFFIX_LEN or not line.endswith(b'"}\n'):
        return None
    cut = len(line) - HASH_SUFFIX_LEN
    if line[cut : cut + len(HASH_PREFIX)] != HASH_PREFIX:
        return None
    stored = line[cut + len(HASH_PREFIX) : -3]
    body = line[:cut] + b"}"
    if hashlib.sha256(body).hexdigest().encode() != stored:
        return None
    return body, stored


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not JSON")


def loads_strict(raw: bytes | str) -> Any:
    """``json.loads`` that refuses ``NaN``/``Infinity``, which canonical JSON cannot carry.

    Every problem is a ``ValueError``: bytes must be UTF-8 (``json.loads`` would guess UTF-16 from a
    stray byte-order mark and report a UTF-16 error), and nesting too deep to parse says so.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start + 1} of the line)") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("nested too deeply to parse") from None
