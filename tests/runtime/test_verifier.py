"""A user's verifier under a time limit: a score, or an unavailable signal saying why there is none."""

import asyncio
import threading

import pytest

from retryctl.runtime import averify, verify


class TestVerify:
    def test_score_is_used(self):
        assert verify(lambda answer: 0.75, "x").value == 0.75

    def test_raising_verifier_degrades_and_says_why(self):
        def broken(answer: str) -> float:
            raise RuntimeError("judge down")

        signal = verify(broken, "x")
        assert not signal.available
        assert "RuntimeError" in signal.note and "judge down" in signal.note

    def test_hanging_verifier_times_out(self):
        release = threading.Event()

        def hangs(answer: str) -> float:
            release.wait(5)
            return 1.0

        signal = verify(hangs, "x", timeout_s=0.05)
        release.set()
        assert not signal.available
        assert "timed out" in signal.note

    @pytest.mark.parametrize("score", [1.5, "high", True, float("nan")])
    def test_bad_scores_are_unavailable(self, score):
        assert not verify(lambda answer: score, "x").available

    def test_async_twin_times_out(self):
        async def slow(answer: str) -> float:
            await asyncio.sleep(5)
            return 1.0

        signal = asyncio.run(averify(slow, "x", timeout_s=0.01))
        assert not signal.available and "timed out" in signal.note

    def test_async_twin_scores(self):
        async def judge(answer: str) -> float:
            return 0.25

        assert asyncio.run(averify(judge, "x")).value == 0.25
