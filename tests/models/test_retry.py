from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from retryctl.exceptions import ConfigError
from retryctl.models import (
    MalformedResponse,
    RetrySettings,
    TerminalBackendError,
    TransientBackendError,
)
from retryctl.models._retry import TransportRetry, call_with_retries, transport_retries


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


def allow_all(told: list[TransportRetry]) -> Callable[[TransportRetry], bool]:
    """A listener that records every retry and lets it go ahead."""

    def listen(retry: TransportRetry) -> bool:
        told.append(retry)
        return True

    return listen


class TestTransportRetries:
    """The listener a driver installs around a draw (:func:`transport_retries`)."""

    @staticmethod
    async def _nosleep(seconds: float) -> None:
        pass

    def test_the_listener_is_told_each_retry_before_its_wait(self):
        told: list[TransportRetry] = []
        fn, calls = flaky(
            [
                TransientBackendError("HTTP 503: down", backend="b", status_code=503),
                TransientBackendError("HTTP 429: slow down", backend="b", status_code=429, retry_after_s=2.0),
            ]
        )
        settings = RetrySettings(attempts=4, initial_wait_s=0.5, jitter=False)

        async def main() -> str:
            with transport_retries(allow_all(told)):
                return await call_with_retries(fn, settings, sleep=self._nosleep, label="m")

        assert asyncio.run(main()) == "ok" and len(calls) == 3
        assert [(r.failed_try, r.tries, r.status_code, r.wait_s) for r in told] == [
            (1, 4, 503, 0.5),
            (2, 4, 429, 2.0),
        ]
        assert {(r.backend, r.error_class, r.fault) for r in told} == {
            ("m", "transient", "TransientBackendError")
        }
        assert str(told[1]) == (
            "transport retry of m: try 2 of 4 failed (transient TransientBackendError: HTTP 429: slow down); "
            "waited 2 s"
        )

    def test_a_refusal_ends_the_retrying_with_the_last_error(self):
        fn, calls = flaky([TransientBackendError("HTTP 503", backend="b", status_code=503)] * 3)

        async def main() -> None:
            with transport_retries(lambda retry: retry.failed_try < 2):
                await call_with_retries(fn, RetrySettings(attempts=5), sleep=self._nosleep)

        with pytest.raises(TransientBackendError) as info:
            asyncio.run(main())
        assert len(calls) == 2 and info.value.attempts == 2

    def test_gathered_requests_see_the_listener_and_it_is_gone_after(self):
        told: list[TransportRetry] = []

        async def one() -> str:
            fn, _ = flaky([TransientBackendError("x", backend="b")])
            return await call_with_retries(fn, RetrySettings(attempts=2), sleep=self._nosleep)

        async def main() -> list[str]:
            with transport_retries(allow_all(told)):
                got = await asyncio.gather(one(), one())
            await one()  # outside: retried, told to nobody
            return list(got)

        assert asyncio.run(main()) == ["ok", "ok"] and [r.failed_try for r in told] == [1, 1]

    def test_the_last_try_and_unretryable_errors_are_not_told(self):
        told: list[TransportRetry] = []
        fn, _ = flaky([TerminalBackendError("HTTP 400", backend="b", status_code=400)])

        async def main() -> None:
            with transport_retries(allow_all(told)):
                await call_with_retries(fn, RetrySettings(attempts=3), sleep=self._nosleep)

        with pytest.raises(TerminalBackendError):
            asyncio.run(main())
        fn2, calls = flaky([TransientBackendError("x", backend="b")] * 2)

        async def main2() -> None:
            with transport_retries(allow_all(told)):
                await call_with_retries(fn2, RetrySettings(attempts=2), sleep=self._nosleep)

        with pytest.raises(TransientBackendError):
            asyncio.run(main2())
        assert len(calls) == 2 and [r.failed_try for r in told] == [1]
