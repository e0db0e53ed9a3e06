"""The decision log: one hash-chained JSONL record per verdict, written through structlog.

Write with :class:`DecisionLog` (a context manager); read back with :func:`read_records`; prove the
chain intact with :func:`verify_log` (or, for lines a caller reads itself, :func:`check_chain`, from
:func:`settled_size`: where no writer is mid-line).
Record shapes are the pydantic models below, all at :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retryctl._lazy import lazy_exports

if TYPE_CHECKING:
    from retryctl.audit._canonical import GENESIS_HASH, SCHEMA_VERSION, canonical_bytes, record_hash
    from retryctl.audit._reader import (
        ChainScan,
        VerifyReport,
        check_chain,
        read_records,
        settled_size,
        verify_log,
    )
    from retryctl.audit._records import (
        BudgetState,
        LogRecord,
        RepairRecord,
        SummaryRecord,
        VerdictRecord,
        parse_record,
    )
    from retryctl.audit._sink import ChainSink
    from retryctl.audit._writer import DecisionLog

__all__ = [
    "GENESIS_HASH",
    "SCHEMA_VERSION",
    "BudgetState",
    "ChainScan",
    "ChainSink",
    "DecisionLog",
    "LogRecord",
    "RepairRecord",
    "SummaryRecord",
    "VerdictRecord",
    "VerifyReport",
    "canonical_bytes",
    "check_chain",
    "parse_record",
    "read_records",
    "record_hash",
    "settled_size",
    "verify_log",
]

# Each name is imported from its module on first use (PEP 562), so that verifying a log, all that
# `retryctl audit` needs, does not import pydantic, the record models, retryctl.controller or
# structlog: with them `retryctl audit` took ~0.45 s to start, without them ~0.15 s.
_MODULES = {
    "GENESIS_HASH": "_canonical",
    "SCHEMA_VERSION": "_canonical",
    "canonical_bytes": "_canonical",
    "record_hash": "_canonical",
    "ChainScan": "_reader",
    "VerifyReport": "_reader",
    "check_chain": "_reader",
    "read_records": "_reader",
    "settled_size": "_reader",
    "verify_log": "_reader",
    "BudgetState": "_records",
    "LogRecord": "_records",
    "RepairRecord": "_records",
    "SummaryRecord": "_records",
    "VerdictRecord": "_records",
    "parse_record": "_records",
    "ChainSink": "_sink",
    "DecisionLog": "_writer",
}


__getattr__, __dir__ = lazy_exports(globals(), _MODULES)
