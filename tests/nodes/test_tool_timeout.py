"""``timeout_s`` on a sync tool: the call is abandoned in its thread, which runs on. A non-idempotent
tool is then never run again beside it; any other tool is retried, and the record says it was
abandoned, not that it stopped."""

from __future__ import annotations

import threading
import time
from typing import Any

from langchain_core.tools import StructuredTool

from retryctl.testing import capture_verdicts
from tests.nodes._support import Sleeps, StreamingToolNode
from tests.nodes.test_tool_node import calling, graph_of, tool_messages

RUNS_FOR_S = 0.6
TIMEOUT_S = 0.15


class SlowCharge:
    """A sync tool that takes ``RUNS_FOR_S`` and counts the calls that started and finished."""

    def __init__(self, *, idempotent: bool) -> None:
        self.started = 0
        self.finished = 0
        self.lock = threading.Lock()
        self.tool = StructuredTool.from_function(self.charge, name="charge")
        self.tool.metadata = {"idempotent": idempotent}

    def charge(self, amount: int) -> str:
        """Charge an amount."""
        with self.lock:
            self.started += 1
        time.sleep(RUNS_FOR_S)
        with self.lock:
            self.finished += 1
        return f"charged {amount}"


def _run(tool: SlowCharge) -> Any:
    sleeps = Sleeps()
    node = StreamingToolNode(
        [tool.tool], timeout_s=TIMEOUT_S, sleep=sleeps, asleep=sleeps.asleep, handle_tool_errors=True
    )
    return capture_verdicts(graph_of(node), calling(("charge", {"amount": 5})))


class TestAbandonedCalls:
    def test_a_non_idempotent_tool_that_overruns_is_not_run_again_beside_itself(self) -> None:
        charge = SlowCharge(idempotent=False)
        out = _run(charge)
        assert out.actions == ["stop"]
        reason = out.verdicts[0]["verdict"]["reason"]
        assert "abandoned, still running" in reason and "not run again" in reason
        assert out.verdicts[0]["verdict"]["evidence"]["error_class"] == "terminal"
        assert "not idempotent" in str(tool_messages(out)[0].content)
        time.sleep(RUNS_FOR_S + 0.2)
        assert (charge.started, charge.finished) == (1, 1)  # its effect happened, once

    def test_an_idempotent_tool_that_overruns_is_retried(self) -> None:
        charge = SlowCharge(idempotent=True)
        out = _run(charge)
        assert out.actions[0] == "retry"
        assert charge.started >= 2
