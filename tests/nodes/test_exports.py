"""Pins the public names of retryctl.nodes and retryctl.testing."""

from __future__ import annotations

import retryctl.nodes
import retryctl.testing

NODES = {
    "ASK_EVENT", "REPLY_EVENT", "TOOL_POLICY", "VERDICT_EVENT", "ArgsAdapter", "CandidateRecord",
    "ControlState", "ControlledStep", "ControlledToolCalls", "ControlledToolNode", "Emitter",
    "MemoryToolJournal", "ResultValidator", "SQLiteToolJournal", "SamplingSchedule", "StepInput",
    "StepOutput", "StepResult", "StepState", "ToolJournal", "ToolResult", "UserReply", "VerdictRecord",
    "WaitRetryAfter", "backoff_seconds", "is_idempotent", "parse_reply", "sqlite_checkpointer", "verdict_of",
}  # fmt: skip

TESTING = {
    "CapturedRun", "ScriptItem", "ScriptedBackend", "ScriptedCall", "acapture_verdicts", "capture_verdicts",
}  # fmt: skip


class TestExports:
    def test_nodes_exports_are_pinned(self) -> None:
        assert set(retryctl.nodes.__all__) == NODES
        assert all(hasattr(retryctl.nodes, name) for name in NODES)

    def test_testing_exports_are_pinned(self) -> None:
        assert set(retryctl.testing.__all__) == TESTING
        assert all(hasattr(retryctl.testing, name) for name in TESTING)

    def test_testing_reexports_the_models_scripted_backend(self) -> None:
        from retryctl.models import ScriptedBackend

        assert retryctl.testing.ScriptedBackend is ScriptedBackend
