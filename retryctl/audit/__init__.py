"""The decision log: one hash-chained JSONL record per verdict, written through structlog.

Write with :class:`DecisionLog` (a context manager); read back with :func:`read_records`; prove the
chain intact with :func:`verify_log`. Record shapes are the pydantic models below, all at
:data:`SCHEMA_VERSION`.
"""

from retryctl.audit._canonical import GENESIS_HASH, canonical_bytes, record_hash
from retryctl.audit._reader import VerifyReport, read_records, verify_log
from retryctl.audit._records import (
    SCHEMA_VERSION,
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
    "ChainSink",
    "DecisionLog",
    "LogRecord",
    "RepairRecord",
    "SummaryRecord",
    "VerdictRecord",
    "VerifyReport",
    "canonical_bytes",
    "parse_record",
    "read_records",
    "record_hash",
    "verify_log",
]
