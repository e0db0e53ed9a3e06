"""OpenAIBackend against a real HTTP fault server on 127.0.0.1: every fault ends classified or retried."""

from __future__ import annotations

import asyncio
import email.utils
import time

import pytest

from retryctl.models import (
    BackendTimeout,
    MalformedResponse,
    OpenAIBackend,
    RepeatedFault,
    RetrySettings,
    SamplingParams,
    TerminalBackendError,
    ToolSpec,
    TransientBackendError,
)
from tests.models._fault_server import FaultServer, cut_connection, hang, ok, raw, status

Q = [{"role": "user", "content": "What is 6*7?"}]
CALC = ToolSpec.coerce({"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}})


def make(server: FaultServer, waits: list[float], **kwargs) -> OpenAIBackend:
    async def record(seconds: float) -> None:
        waits.append(seconds)

    kwargs.setdefault("retry", RetrySettings(attempts=3, initial_wait_s=0.01, jitter=False))
    kwargs.setdefault("timeout_s", 5.0)
    return OpenAIBackend(model="fault-model", base_url=server.url, sleep=record, **kwargs)


def _tries(attempts: int) -> RetrySettings:
    return RetrySettings(attempts=attempts, initial_wait_s=0.01, jitter=False)


class TestRepeated500:
    """A 500 the same request meets again word for word is its own (llama.cpp's server on a tool-call
    conversation): the retries stop at the second, not after all of them."""

    def test_the_same_500_twice_ends_the_retries_as_the_requests_own(self, fault_server):
        waits: list[float] = []
        fault_server.script.extend([status(500, message="7 validation errors: messages.1")] * 4)
        backend = make(fault_server, waits, retry=_tries(4))
        with pytest.raises(RepeatedFault) as info:
            asyncio.run(backend.sample(Q))
        assert len(fault_server.requests) == 2 and waits == [0.01]
        assert fault_server.requests[0] == fault_server.requests[1]  # the same request, sent again
        fault = info.value
        assert fault.status_code == 500 and fault.attempts == 2
        assert fault.error_class == "terminal" and not fault.retryable
        assert fault.detail == "7 validation errors: messages.1"

    def test_500s_that_differ_are_retried_to_the_end(self, fault_server):
        waits: list[float] = []
        fault_server.script.extend([status(500, message=f"worker {i} crashed") for i in range(3)])
        with pytest.raises(TransientBackendError) as info:
            asyncio.run(make(fault_server, waits).sample(Q))
        assert not isinstance(info.value, RepeatedFault)
        assert info.value.attempts == 3 and info.value.retryable
        assert len(fault_server.requests) == 3

    def test_each_500_is_compared_with_the_try_just_before(self, fault_server):
        waits: list[float] = []
        fault_server.script.extend(
            [status(500, message="a"), status(503), status(500, message="a"), status(500, message="a")]
        )
        backend = make(fault_server, waits, retry=_tries(5))
        with pytest.raises(RepeatedFault) as info:
            asyncio.run(backend.sample(Q))
        assert info.value.attempts == 4 and len(fault_server.requests) == 4

    def test_a_repeated_502_or_503_is_the_servers_state_and_still_retried(self, fault_server):
        waits: list[float] = []
        fault_server.script.extend([status(502)] * 3)
        with pytest.raises(TransientBackendError) as info:
            asyncio.run(make(fault_server, waits).sample(Q))
        assert info.value.attempts == 3 and len(fault_server.requests) == 3


class TestOpenAIBackendFaults:
    def test_429_retry_after_is_waited_exactly_then_succeeds(self, fault_server):
        waits: list[float] = []
        fault_server.script.extend([status(429, retry_after="7"), ok()])
        [cand] = asyncio.run(make(fault_server, waits).sample(Q))
        assert cand.text == "42-0"
        assert waits == [7.0]
        assert len(fault_server.requests) == 2

    def test_retry_after_as_http_date_is_honoured(self, fault_server):
        waits: list[float] = []
        when = email.utils.formatdate(time.time() + 30, usegmt=True)
        fault_server.script.extend([status(429, retry_after=when), ok()])
        asyncio.run(make(fault_server, waits).sample(Q))
        assert len(waits) == 1 and 25.0 <= waits[0] <= 30.0

    def test_retry_after_beyond_the_cap_is_not_waited_for(self, fault_server):
        waits: list[float] = []
        fault_server.script.append(status(429, retry_after="600"))
        backend = make(fault_server, waits, retry=RetrySettings(attempts=3, max_retry_after_s=60))
        with pytest.raises(TransientBackendError) as info:
            asyncio.run(backend.sample(Q))
        assert info.value.status_code == 429
        assert info.value.retry_after_s == 600.0
        assert info.value.attempts == 1 and waits == []

    @pytest.mark.parametrize("code", [500, 502, 503])
    def test_server_errors_back_off_exponentially_then_succeed(self, fault_server, code):
        waits: list[float] = []
        # Each 500 says something else (a 500 repeated word for word ends the retries: TestRepeated500).
        fault_server.script.extend([status(code, message="busy: 1"), status(code, message="busy: 2"), ok()])
        [cand] = asyncio.run(make(fault_server, waits).sample(Q))
        assert cand.text == "42-0"
        assert waits == [0.01, 0.02]

    def test_persistent_503_ends_in_a_transient_error_after_all_attempts(self, fault_server):
        waits: list[float] = []
        fault_server.script.extend([status(503)] * 3)
        with pytest.raises(TransientBackendError) as info:
            asyncio.run(make(fault_server, waits).sample(Q))
        assert info.value.status_code == 503 and info.value.attempts == 3
        assert info.value.retryable
        assert len(fault_server.requests) == 3

    def test_hang_past_the_timeout_is_a_timeout_then_a_retry_succeeds(self, fault_server):
        waits: list[float] = []
        fault_server.script.extend([hang(), ok()])
        [cand] = asyncio.run(make(fault_server, waits, timeout_s=0.3).sample(Q))
        assert cand.text == "42-0" and len(waits) == 1

    def test_hang_every_time_ends_in_backend_timeout(self, fault_server):
        waits: list[float] = []
        fault_server.script.extend([hang(), hang()])
        backend = make(fault_server, waits, timeout_s=0.3, retry=RetrySettings(attempts=2))
        with pytest.raises(BackendTimeout) as info:
            asyncio.run(backend.sample(Q))
        assert info.value.attempts == 2 and info.value.error_class == "transient"

    def test_connection_cut_mid_body_is_transient_and_retried(self, fault_server):
        waits: list[float] = []
        fault_server.script.extend([cut_connection(), ok()])
        [cand] = asyncio.run(make(fault_server, waits).sample(Q))
        assert cand.text == "42-0" and len(fault_server.requests) == 2

    @pytest.mark.parametrize(
        ("body", "problem"),
        [
            (b"<html>502 Bad Gateway</html>", "not JSON"),
            (b'{"choices": [{"message": {"content": "4', "not JSON"),
            (b'{"id": "x", "choices": []}', "no choices"),
            (b'{"choices": [{"text": "completions format"}]}', "choices.0.message"),
            (b'{"choices": "nope"}', "choices"),
            (b"[1, 2, 3]", "not a chat completion"),
            (b'{"choices": [{"message": {"content": "x"}, "logprobs": {"content": [1]}}]}', "logprobs"),
        ],
    )
    def test_malformed_bodies_are_classified_not_retried(self, fault_server, body, problem):
        waits: list[float] = []
        fault_server.script.append(raw(body))
        with pytest.raises(MalformedResponse) as info:
            asyncio.run(make(fault_server, waits).sample(Q))
        assert problem in str(info.value)
        assert info.value.error_class == "validation" and not info.value.retryable
        assert len(fault_server.requests) == 1 and waits == []
        assert info.value.body == body.decode()[:500]

    def test_malformed_body_is_retried_when_asked(self, fault_server):
        waits: list[float] = []
        fault_server.script.extend([raw(b"garbage"), ok()])
        retry = RetrySettings(attempts=2, retry_malformed=True, jitter=False, initial_wait_s=0.01)
        [cand] = asyncio.run(make(fault_server, waits, retry=retry).sample(Q))
        assert cand.text == "42-0"

    @pytest.mark.parametrize("code", [400, 401, 404, 422])
    def test_client_errors_are_terminal_and_not_retried(self, fault_server, code):
        waits: list[float] = []
        fault_server.script.append(status(code))
        with pytest.raises(TerminalBackendError) as info:
            asyncio.run(make(fault_server, waits).sample(Q))
        assert info.value.status_code == code and len(fault_server.requests) == 1

    def test_connection_refused_is_transient_after_all_attempts(self):
        waits: list[float] = []
        server = FaultServer().start()
        url = server.url
        server.stop()
        backend = OpenAIBackend(
            model="m",
            base_url=url,
            retry=RetrySettings(attempts=2, jitter=False, initial_wait_s=0.01),
            sleep=lambda s: _record(waits, s),
        )
        with pytest.raises(TransientBackendError) as info:
            asyncio.run(backend.sample(Q))
        assert info.value.attempts == 2 and "connection failed" in str(info.value)


async def _record(waits: list[float], seconds: float) -> None:
    waits.append(seconds)


class TestOpenAIBackendRequests:
    def test_sampling_params_reach_the_server(self, fault_server):
        params = SamplingParams(
            temperature=0.3, top_p=0.9, top_k=20, min_p=0.1, seed=11, max_tokens=33,
            stop=("\n",), top_logprobs=3,
            response_format={"type": "json_object"},
            tools=(CALC,),
        )  # fmt: skip
        asyncio.run(make(fault_server, []).sample(Q, params))
        [req] = fault_server.requests
        assert req["temperature"] == 0.3 and req["top_p"] == 0.9 and req["seed"] == 11
        assert req["top_k"] == 20 and req["min_p"] == 0.1 and req["max_tokens"] == 33
        assert req["stop"] == ["\n"] and req["logprobs"] is True and req["top_logprobs"] == 3
        assert req["response_format"] == {"type": "json_object"}
        assert req["tools"][0]["function"]["name"] == "calc"
        assert "n" not in req and req["messages"] == Q

    def test_n_is_used_when_the_server_honours_it(self, fault_server):
        backend = make(fault_server, [])
        cands = asyncio.run(backend.sample(Q, SamplingParams(seed=5), k=3))
        assert [c.text for c in cands] == ["42-0", "42-1", "42-2"]
        assert len(fault_server.requests) == 1 and fault_server.requests[0]["n"] == 3
        assert backend.honours_n is True
        # The call's usage (10 in, 6 out) is split so that candidates add up to it.
        assert sum(c.usage.input_tokens for c in cands) == 10
        assert sum(c.usage.output_tokens for c in cands) == 6

    def test_ignored_n_is_detected_and_filled_with_distinct_seeds(self, fault_server):
        backend = make(fault_server, [])
        fault_server.script.append(ok(choices=1))
        cands = asyncio.run(backend.sample(Q, SamplingParams(seed=100), k=3))
        assert len(cands) == 3 and backend.honours_n is False
        seeds = [r["seed"] for r in fault_server.requests]
        assert seeds[0] == 100 and sorted(seeds[1:]) == [101, 102]
        assert all("n" not in r for r in fault_server.requests[1:])
        assert "ignored n=3" in cands[1].notes[0]
        # Remembered: the next call goes straight to parallel requests.
        fault_server.requests.clear()
        asyncio.run(backend.sample(Q, SamplingParams(seed=7), k=2))
        assert sorted(r["seed"] for r in fault_server.requests) == [7, 8]
        assert all("n" not in r for r in fault_server.requests)

    def test_one_failing_parallel_request_fails_the_call_after_all_end(self, fault_server):
        backend = make(fault_server, [], n_mode="parallel", retry=RetrySettings(attempts=1))
        fault_server.script.extend([ok(), status(400), ok()])
        with pytest.raises(TerminalBackendError):
            asyncio.run(backend.sample(Q, k=3))
        assert len(fault_server.requests) == 3

    def test_sync_twin_gives_the_same_result_as_async(self, fault_server):
        backend = make(fault_server, [])
        sync = backend.sample_sync(Q, SamplingParams(seed=1), k=2)
        again = asyncio.run(backend.sample(Q, SamplingParams(seed=1), k=2))
        assert [c.text for c in sync] == [c.text for c in again]
        backend.close()

    def test_missing_usage_is_noted(self, fault_server):
        from tests.models._fault_server import completion

        fault_server.script.append(raw(completion(1, usage=False)))
        [cand] = asyncio.run(make(fault_server, []).sample(Q))
        assert cand.usage.total_tokens == 0 and "no usage" in cand.notes[0]
