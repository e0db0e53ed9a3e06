"""What the breaker-store tests share."""

from __future__ import annotations

from retryctl.controller._breaker_store import BreakerRecord


def bump(rec: BreakerRecord) -> tuple[BreakerRecord, int]:
    """An update that counts one more failure and returns the new count."""
    new = BreakerRecord(state=rec.state, failures=rec.failures + 1)
    return new, new.failures
