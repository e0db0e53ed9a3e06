"""Recording sample banks from a model (``retryctl record``) and sweeping its sampling knobs
(``retryctl sweep``): the data a stopping policy is tuned and judged on."""

from __future__ import annotations

from retryctl.record._record import (
    EXTRACTIONS,
    BankJob,
    Extraction,
    RecordPlan,
    bank_line,
    record_bank,
    recorded_ids,
    sampling_of,
)

__all__ = [
    "EXTRACTIONS",
    "BankJob",
    "Extraction",
    "RecordPlan",
    "bank_line",
    "record_bank",
    "recorded_ids",
    "sampling_of",
]
