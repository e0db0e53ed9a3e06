from __future__ import annotations

import asyncio

import pytest

from retryctl.exceptions import ConfigError
from retryctl.models import (
    MalformedResponse,
    RetrySettings,
    TerminalBackendError,
    TransientBackendError,
)
from retryctl.models._retry import call_with_retries


def flaky(errors: list[Exception], result: str = "ok"):
    calls = []

    async def fn() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result

    return fn, calls


class TestRetrySettings:
    def test_bad_values_name_the_field(self):
        with pytest.raises(ConfigError, match="attempts"):
            RetrySettings(attempts=0)
        with pytest.raises(ConfigError, match="max_wait_s"):
            RetrySettings(max_wait_s=-1)

    def test_backoff_doubles_up_to_the_cap_and_honours_retry_after(self):
        s = RetrySettings(initial_wait_s=1, max_wait_s=5, jitter=False)
        assert [s.backoff(n, None) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]
        err = TransientBackendError("x", backend="b", retry_after_s=9.5)
        assert s.backoff(1, err) == 9.5

    def test_jitter_stays_within_the_ceiling(self):
        s = RetrySettings(initial_wait_s=2, jitter=True)
        assert all(0 <= s.backoff(1, None) <= 2 for _ in range(50))

    def test_what_is_retried(self):
        s = RetrySettings(max_retry_after_s=10)
        assert s.should_retry(TransientBackendError("x", backend="b"))
        assert not s.should_retry(TransientBackendError("x", backend="b", retry_after_s=11))
        assert not s.should_retry(MalformedResponse("x", backend="b"))
        assert RetrySettings(retry_malformed=True).should_retry(MalformedResponse("x", backend="b"))
        assert not s.should_retry(TerminalBackendError("x", backend="b"))
        assert not s.should_retry(ValueError("not ours"))


class TestCallWithRetries:
    def test_retries_transient_then_returns(self):
        waits: list[float] = []

        async def sleep(s: float) -> None:
            waits.append(s)

        fn, calls = flaky([TransientBackendError("a", backend="b")] * 2)
        settings = RetrySettings(attempts=3, initial_wait_s=0.5, jitter=False)
        assert asyncio.run(call_with_retries(fn, settings, sleep=sleep)) == "ok"
        assert len(calls) == 3 and waits == [0.5, 1.0]

    def test_gives_up_with_the_attempt_count(self):
        async def sleep(s: float) -> None:
            pass

        fn, calls = flaky([TransientBackendError("a", backend="b")] * 5)
        with pytest.raises(TransientBackendError) as info:
            asyncio.run(call_with_retries(fn, RetrySettings(attempts=2), sleep=sleep))
        assert info.value.attempts == 2 and len(calls) == 2

    def test_terminal_is_not_retried(self):
        fn, calls = flaky([TerminalBackendError("a", backend="b", status_code=400)])
        with pytest.raises(TerminalBackendError):
            asyncio.run(call_with_retries(fn, RetrySettings(attempts=5)))
        assert len(calls) == 1
