"""The sampling loop and its drivers: rule objects in the policy, transport retries on the ledger and in
the log (a real OpenAI-compatible HTTP server on 127.0.0.1), and the batch turn given up at the draw."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from retryctl._turn import Turn
from retryctl.audit import DecisionLog, VerdictRecord, read_records, verify_log
from retryctl.cli import app
from retryctl.controller import Budget, Ledger, Policy, Tally
from retryctl.controller.stopping import EscWindow, FixedSamples
from retryctl.models import Candidate, OpenAIBackend, RetrySettings, SamplingParams
from retryctl.models._messages import MessagesLike
from retryctl.nodes import ControlledStep
from retryctl.nodes._sampling import SamplingSchedule, run_async, sampling
from retryctl.testing import ScriptedBackend
from tests.models._fault_server import FaultServer, status
from tests.nodes._support import Runner, user


def _verdicts(path: Path) -> list[VerdictRecord]:
    return [r for r in read_records(path) if isinstance(r, VerdictRecord)]


def at_least_six(tally: Tally) -> bool:
    return tally.n >= 6


class TestStoppingRuleObjects:
    # The script decides where each rule would stop: esc-2 alone at 2 ("3", "3"), at_least_six alone
    # at 6, their conjunction only at 8, the first window of two that agrees at six samples or more.
    SCRIPT = ("3", "3", "1", "2", "4", "5", "6", "6", "7", "8")

    def test_a_conjunction_stops_when_both_rules_say_stop(self, run: Runner, tmp_path: Path) -> None:
        backend = ScriptedBackend(self.SCRIPT)
        rule = EscWindow(window=2) & at_least_six
        policy = Policy(stopping=rule, min_samples=1, max_samples=10, accept_threshold=0.0)
        log = DecisionLog(tmp_path / "d.jsonl")
        out = run(ControlledStep(backend, policy=policy, log=log).compile(), user("q"))
        log.close()
        assert out.actions == ["accept"]
        assert len(backend.calls) == 8  # esc-2 alone would stop at 2, at_least_six alone at 6
        [record] = _verdicts(tmp_path / "d.jsonl")
        assert record.stopping["rule"] == "(esc-2 & at_least_six)"
        assert record.stopping["stop"] is True
        assert "agreement: posterior of (esc-2 & at_least_six) over 8 samples" in record.notes

    def test_a_disjunction_stops_at_the_first_rule_that_says_stop(self, run: Runner) -> None:
        backend = ScriptedBackend(("1", "2", "3", "3", "4", "4"))
        policy = Policy(
            stopping=FixedSamples(n=6) | EscWindow(window=2),
            min_samples=1,
            max_samples=10,
            accept_threshold=0,
        )
        out = run(ControlledStep(backend, policy=policy).compile(), user("q"))
        assert len(backend.calls) == 4  # esc-2's second window ("3", "3"); sc-6 alone would draw 6
        assert out.verdicts[0]["verdict"]["evidence"]["stopping"]["rule"] == "(sc-6 | esc-2)"


class _Slow(ScriptedBackend):
    """A scripted backend whose call waits on the event loop, as an HTTP request does."""

    def __init__(self, order: list[str]) -> None:
        super().__init__(["42"])
        self.order = order

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        self.order.append("draw starts")
        await asyncio.sleep(0.05)
        self.order.append("draw ends")
        return await super().sample(messages, params, k=k)


class TestRunAsync:
    def test_a_batch_task_gives_its_turn_up_for_the_draw(self) -> None:
        # The backend knows nothing of the turn: the driver's await gives it up, so another task of
        # the batch runs while the request is out.
        async def main() -> list[str]:
            turn, order = Turn(overstay_s=60), list[str]()
            backend = _Slow(order)
            loop = sampling(
                messages=[{"role": "user", "content": "q"}],
                model=backend.name,
                attempt=1,
                min_samples=1,
                max_samples=1,
                rule=FixedSamples(n=1),
                equivalence=lambda text: text,
                schedule=SamplingSchedule(),
                ledgers=[Ledger()],
            )

            async def stepper() -> None:
                async with turn.hold():
                    await run_async(loop, backend, [{"role": "user", "content": "q"}])
                    order.append("stepper done")

            async def other() -> None:
                await asyncio.sleep(0)
                async with turn.hold():
                    order.append("other ran")

            await asyncio.gather(stepper(), other())
            return order

        assert asyncio.run(main()) == ["draw starts", "other ran", "draw ends", "stepper done"]


class TestTransportRetries:
    @pytest.fixture
    def waits(self) -> list[float]:
        return []

    def _backend(self, server: FaultServer, waits: list[float], attempts: int = 4) -> OpenAIBackend:
        async def sleep(seconds: float) -> None:
            waits.append(seconds)

        settings = RetrySettings(attempts=attempts, initial_wait_s=0.25, jitter=False)
        return OpenAIBackend(model="fault", base_url=server.url, retry=settings, sleep=sleep)

    def _step(self, backend: OpenAIBackend, path: Path, **kwargs: Any) -> ControlledStep:
        policy = Policy(stopping="sc-1", max_samples=1, accept_threshold=0.5)
        return ControlledStep(backend, policy=policy, log=DecisionLog(path), step_id="solve", **kwargs)

    def test_each_retry_is_charged_and_on_the_record(
        self, run: Runner, fault_server: FaultServer, waits: list[float], tmp_path: Path
    ) -> None:
        fault_server.script.extend([status(503), status(429, retry_after="0.5")])
        path, ledger = tmp_path / "d.jsonl", Ledger()
        backend = self._backend(fault_server, waits)
        step = self._step(backend, path, run_ledger=ledger)
        try:
            out = run(step.compile(), user("6*7?"))
        finally:
            backend.close()
            step.emitter.log.close()  # type: ignore[union-attr]
        assert out.actions == ["accept"]
        assert len(fault_server.requests) == 3 and waits == [0.25, 0.5]
        # Charged on the step's ledger and on the run's, one per request sent again.
        assert out.output["result"]["usage"]["transport_retries"] == 2
        assert ledger.used().transport_retries == 2 and ledger.used().attempts == 1
        [record] = _verdicts(path)
        assert record.budget.used["transport_retries"] == 2
        assert record.budget.limit["transport_retries"] is None
        retries = [n for n in record.notes if n.startswith("transport retry")]
        assert retries == [
            "transport retry of fault: try 1 of 4 failed (transient TransientBackendError: "
            "HTTP 503: Error code: 503 - scripted 503); waited 0.25 s",
            "transport retry of fault: try 2 of 4 failed (transient TransientBackendError: "
            "HTTP 429: Error code: 429 - scripted 429); waited 0.5 s",
        ]
        assert verify_log(path).ok
        # ``retryctl audit --why`` tells them, with the count beside the other budgets.
        told = CliRunner().invoke(app, ["audit", str(path), "--why", record.run_id])
        assert told.exit_code == 0, told.output
        assert "transport_retries 2" in told.output
        assert "try 2 of 4 failed (transient TransientBackendError: HTTP 429" in told.output

    def test_a_limit_refuses_the_retry_and_the_controller_decides(
        self, run: Runner, fault_server: FaultServer, waits: list[float], tmp_path: Path
    ) -> None:
        fault_server.script.extend([status(503), status(502)])
        path = tmp_path / "d.jsonl"
        backend = self._backend(fault_server, waits)
        step = self._step(backend, path, budget=Budget(transport_retries=1))
        try:
            out = run(step.compile(), user("6*7?"))
        finally:
            backend.close()
            step.emitter.log.close()  # type: ignore[union-attr]
        # One retry allowed (503 -> 502); the second is refused, so the 502 goes to the controller,
        # whose own retry (a new attempt) is served by the third request.
        assert out.actions == ["retry", "accept"]
        assert len(fault_server.requests) == 3 and waits == [0.25]
        first, second = _verdicts(path)
        assert first.error_class == "transient" and first.budget.used["transport_retries"] == 1
        assert first.budget.limit["transport_retries"] == 1
        [refused] = [n for n in first.notes if "refused" in n]
        assert refused.startswith("transport retry of fault after try 2 refused (TransientBackendError): ")
        assert "'transport_retries'" in refused
        assert second.budget.used["transport_retries"] == 1  # nothing retried in the second attempt

    def test_a_limit_of_zero_turns_the_backends_retrying_off(
        self, run: Runner, fault_server: FaultServer, waits: list[float], tmp_path: Path
    ) -> None:
        fault_server.script.extend([status(503)])
        backend = self._backend(fault_server, waits)
        step = self._step(backend, tmp_path / "d.jsonl", budget=Budget(transport_retries=0))
        try:
            out = run(step.compile(), user("6*7?"))
        finally:
            backend.close()
            step.emitter.log.close()  # type: ignore[union-attr]
        assert out.actions == ["retry", "accept"]
        assert len(fault_server.requests) == 2 and waits == []
        assert out.output["result"]["usage"]["transport_retries"] == 0
