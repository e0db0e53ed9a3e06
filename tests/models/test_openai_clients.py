"""OpenAIBackend's HTTP clients: requests spread over small pools; the body it POSTs is plain JSON."""

from __future__ import annotations

import asyncio
from typing import Any

from retryctl.models import OpenAIBackend, SamplingParams
from retryctl.models._openai import _REQUESTS_PER_CLIENT, _Clients

Q = [{"role": "user", "content": "What is 6*7?"}]


class _FakeClient:
    def __init__(self, number: int) -> None:
        self.number = number
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def _clients() -> tuple[_Clients, list[Any]]:
    made: list[Any] = []

    def make() -> Any:
        made.append(_FakeClient(len(made)))
        return made[-1]

    return _Clients(make), made


class TestClients:
    def test_a_serial_caller_keeps_one_client(self) -> None:
        clients, made = _clients()
        for _ in range(5):
            with clients.lease() as client:
                assert client is made[0]
        assert len(made) == 1 and clients.in_flight == [0]

    def test_concurrent_requests_fill_one_client_before_the_next(self) -> None:
        clients, made = _clients()
        held = [clients.lease() for _ in range(2 * _REQUESTS_PER_CLIENT + 3)]
        got = [lease.__enter__() for lease in held]
        assert len(made) == 3
        assert clients.in_flight == [_REQUESTS_PER_CLIENT, _REQUESTS_PER_CLIENT, 3]
        assert got[0] is made[0] and got[_REQUESTS_PER_CLIENT] is made[1] and got[-1] is made[2]
        held[0].__exit__(None, None, None)
        with clients.lease() as client:  # the first client with room again
            assert client is made[0]
        for lease in held[1:]:
            lease.__exit__(None, None, None)
        assert clients.in_flight == [0, 0, 0]

    def test_aclose_closes_every_client_even_with_a_lease_still_held(self) -> None:
        clients, made = _clients()
        held = [clients.lease() for _ in range(_REQUESTS_PER_CLIENT + 1)]
        for lease in held:
            lease.__enter__()
        asyncio.run(clients.aclose())
        assert [c.closed for c in made] == [True, True]
        for lease in held:  # end quietly: their counters belong to the closed set
            lease.__exit__(None, None, None)
        assert clients.in_flight == []
        with clients.lease() as client:  # a new client after closing
            assert client is made[2]


class TestBackendOverManyClients:
    def test_concurrent_samples_all_answer_and_aclose_ends_them(self, fault_server) -> None:
        backend = OpenAIBackend(model="m", base_url=fault_server.url, timeout_s=10.0)

        async def run() -> list[str]:
            got = await asyncio.gather(*(backend.sample(Q) for _ in range(2 * _REQUESTS_PER_CLIENT + 1)))
            await backend.aclose()
            return [c.text for cands in got for c in cands]

        assert asyncio.run(run()) == ["42-0"] * (2 * _REQUESTS_PER_CLIENT + 1)
        assert len(fault_server.requests) == 2 * _REQUESTS_PER_CLIENT + 1

    def test_extra_body_is_merged_into_the_body_and_sampling_params_win(self, fault_server) -> None:
        backend = OpenAIBackend(
            model="m", base_url=fault_server.url, extra_body={"top_k": 5, "cache_prompt": True}
        )
        asyncio.run(backend.sample(Q, SamplingParams(top_k=20)))
        [req] = fault_server.requests
        assert req["top_k"] == 20 and req["cache_prompt"] is True
        assert "extra_body" not in req and req["model"] == "m" and req["messages"] == Q
