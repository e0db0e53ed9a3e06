"""The adaptive driver's decisions on a scripted backend (the real path is in test_real_server.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from retryctl.audit import DecisionLog, read_records, verify_log
from retryctl.controller import Breaker, BreakerConfig, Budget, ManualClock
from retryctl.exceptions import BreakerOpen
from retryctl.gateway import AdaptiveOptions
from retryctl.gateway._adaptive import Decided, decide_request
from retryctl.models import (
    Candidate,
    RetrySettings,
    SamplingParams,
    ScriptedBackend,
    TransientBackendError,
    Usage,
)

MESSAGES = [{"role": "user", "content": "6 * 7?"}]


def _decide(
    backend: ScriptedBackend,
    options: AdaptiveOptions | None = None,
    *,
    log: DecisionLog | None = None,
    breaker: Breaker | None = None,
) -> Decided:
    return asyncio.run(
        decide_request(
            backend=backend,
            messages=MESSAGES,
            params=SamplingParams(temperature=0.7, max_tokens=32),
            options=options or AdaptiveOptions(),
            run_id="run-1",
            retry=RetrySettings(attempts=1, initial_wait_s=0.0, jitter=False),
            clock=time.monotonic,
            breaker=breaker,
            log=log,
        )
    )


class TestDecideRequest:
    def test_agreeing_samples_stop_early_and_accept(self) -> None:
        backend = ScriptedBackend(["The answer is 42."] * 8, confidence=0.95)
        decided = _decide(backend, AdaptiveOptions(min_samples=3, max_samples=8))
        assert decided.verdict.action.value == "accept"
        assert decided.samples_used == 3  # three agreeing votes satisfy the default rule at 8
        assert decided.chosen is not None and decided.chosen["answer"] == "42"
        assert decided.candidate_summary() == [{"answer": "42", "count": 3, "confidence": 1.0}]

    def test_disagreeing_samples_draw_on_and_report_the_leader_unaccepted(self) -> None:
        script = ["The answer is 41.", "The answer is 42.", "The answer is 43.", "The answer is 42."] * 2
        decided = _decide(
            ScriptedBackend(script, confidence=0.9), AdaptiveOptions(min_samples=2, max_samples=8)
        )
        # After 7 draws '42' leads 3 to 2 with one sample left: it cannot lose, so the rule stops there.
        assert decided.samples_used == 7
        assert "'42' has 3 of 7 votes" in decided.stopping_reason
        assert decided.verdict.action.value == "stop"
        assert "< threshold 0.80" in decided.verdict.reason  # 4 of 7 is not enough agreement to accept
        assert decided.chosen is not None and decided.chosen["answer"] == "42"
        summary = decided.candidate_summary()
        assert summary[0] == {"answer": "42", "count": 3, "confidence": round(3 / 7, 6)}
        assert sum(c["count"] for c in summary) == 7

    def test_a_transient_fault_is_retried_and_the_retry_answers(self) -> None:
        fault = TransientBackendError("HTTP 503: busy", backend="scripted", status_code=503)
        backend = ScriptedBackend([fault, "The answer is 42.", "The answer is 42."], confidence=0.95)
        decided = _decide(backend, AdaptiveOptions(min_samples=2, max_samples=2))
        assert decided.verdict.action.value == "accept"
        assert decided.attempts == 2
        assert decided.error is None

    def test_a_sample_budget_ends_sampling_and_says_so(self) -> None:
        script = ["The answer is 41.", "The answer is 42."] * 4
        options = AdaptiveOptions(min_samples=2, max_samples=8, budget=Budget(samples=3))
        decided = _decide(ScriptedBackend(script, confidence=0.9), options)
        assert decided.samples_used == 3
        assert "sampling ended early: run budget 'samples' is spent (3 of 3)" in decided.notes

    def test_an_open_breaker_draws_nothing_and_names_it(self) -> None:
        clock = ManualClock()
        breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=60), clock=clock)
        breaker.report("scripted", failed=True)
        backend = ScriptedBackend(["The answer is 42."])
        decided = _decide(backend, breaker=breaker)
        assert decided.chosen is None
        assert isinstance(decided.error, BreakerOpen)
        assert decided.verdict.action.value == "stop"
        assert backend.calls == []  # refused before any call

    def test_every_verdict_and_a_summary_are_logged(self, tmp_path: Path) -> None:
        fault = TransientBackendError("HTTP 503: busy", backend="scripted", status_code=503)
        backend = ScriptedBackend([fault, "The answer is 42.", "The answer is 42."], confidence=0.95)
        with DecisionLog(tmp_path / "d.jsonl") as log:
            _decide(backend, AdaptiveOptions(min_samples=2, max_samples=2), log=log)
        assert verify_log(tmp_path / "d.jsonl").ok
        records = list(read_records(tmp_path / "d.jsonl"))
        assert [r.action for r in records if r.kind == "verdict"] == ["retry", "accept"]
        summary = [r for r in records if r.kind == "summary"]
        assert len(summary) == 1 and summary[0].final_answer == "42"
        assert {r.run_id for r in records if r.kind != "repair"} == {"run-1"}

    def test_the_verdict_names_the_draw_the_response_carries(self, tmp_path: Path) -> None:
        script = ["The answer is 5.", "The answer is 4.", "The answer is 4.", "The answer is 4."]
        with DecisionLog(tmp_path / "d.jsonl") as log:
            decided = _decide(
                ScriptedBackend(script, confidence=0.95),
                AdaptiveOptions(min_samples=4, max_samples=4),
                log=log,
            )
        assert decided.verdict.action.value == "accept" and decided.verdict.answer == "4"
        assert decided.chosen is not None and decided.chosen["text"] == "The answer is 4."
        (verdict,) = [r for r in read_records(tmp_path / "d.jsonl") if r.kind == "verdict"]
        summary = verdict.candidates_summary
        assert isinstance(summary, dict) and summary["chosen"] == 1  # the first '4', not the first draw
        assert decided.candidates[1] is decided.chosen


class TestBlockAgreesWithLog:
    """The ``retryctl`` block counts as the records do (one definition of attempts, calls, samples)."""

    def test_a_sample_cut_short_is_drawn_and_paid_but_no_vote_and_the_reason_says_so(self) -> None:
        cut = Candidate(text="The answer", model="scripted", finish_reason="cut", usage=Usage(3, 2))
        script: list[str | Candidate] = ["The answer is 42.", cut, "The answer is 41."]
        decided = _decide(
            ScriptedBackend(script, confidence=0.9), AdaptiveOptions(min_samples=3, max_samples=3)
        )
        block = decided.block("run-1")
        assert block["samples_used"] == 3
        assert block["history"] == [{"attempt": 1, "action": "stop", "samples": 3, "votes": 2}]
        # The rule speaks of votes ("2 of 2"): the reason says the third sample was drawn and cut.
        assert "(3 samples drawn, 2 of them votes: 1 cut short, 0 repeats)" in block["stopping_reason"]

    def test_after_a_retry_the_block_the_records_and_the_reason_name_the_attempts(
        self, tmp_path: Path
    ) -> None:
        fault = TransientBackendError("HTTP 503: busy", backend="scripted", status_code=503)
        backend = ScriptedBackend([fault, "The answer is 42.", "The answer is 42."], confidence=0.95)
        with DecisionLog(tmp_path / "d.jsonl") as log:
            decided = _decide(backend, AdaptiveOptions(min_samples=2, max_samples=2), log=log)
        block = decided.block("run-1")
        records = list(read_records(tmp_path / "d.jsonl"))
        verdicts = [r for r in records if r.kind == "verdict"]
        (summary,) = [r for r in records if r.kind == "summary"]
        assert block["attempts"] == len(verdicts) == 2
        assert [h["action"] for h in block["history"]] == ["retry", "accept"]
        assert block["stopping_reason"].startswith("attempt 2: ")
        used = summary.budget_used
        assert isinstance(used, dict)
        assert block["calls"] == used["attempts"] == 2  # the failed call is a call
        assert block["samples_used"] == used["samples"] == 2

    def test_an_unaccepted_answer_is_the_summarys_final_answer(self, tmp_path: Path) -> None:
        script = ["The answer is 34.", "The answer is 35."] * 2
        with DecisionLog(tmp_path / "d.jsonl") as log:
            decided = _decide(
                ScriptedBackend(script, confidence=0.5),
                AdaptiveOptions(min_samples=2, max_samples=2),
                log=log,
            )
        assert decided.verdict.action.value == "stop" and decided.chosen is not None
        (summary,) = [r for r in read_records(tmp_path / "d.jsonl") if r.kind == "summary"]
        assert summary.final_answer == decided.chosen["answer"] == "34"

    def test_the_chosen_sample_is_the_one_drawn_with_its_finish_reason(self) -> None:
        long = Candidate(text="The answer is 42 and", model="scripted", finish_reason="length")
        decided = _decide(
            ScriptedBackend([long], confidence=0.9), AdaptiveOptions(min_samples=1, max_samples=1)
        )
        drawn = decided.chosen_candidate
        assert drawn is not None and drawn.text == long.text and drawn.finish_reason == "length"
