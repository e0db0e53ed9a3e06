"""The sandbox's errors live in the one tree of :mod:`retryctl.exceptions`; re-exported here for the
sandbox modules."""

from __future__ import annotations

from retryctl.exceptions import SandboxError, SandboxUnavailable

__all__ = ["SandboxError", "SandboxUnavailable"]
