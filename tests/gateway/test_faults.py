"""RequestFaults: what a worker remembers of 500s that were requests' own (pure, no server)."""

from __future__ import annotations

from retryctl.gateway._faults import RepeatedFault, RequestFaults, ServerFault, refusal, request_own
from retryctl.models._openai_wire import status_error


def _fault(detail: str = "7 validation errors") -> ServerFault:
    return ServerFault(f"HTTP 500: {detail}", backend="m", detail=detail)


class TestRequestFaults:
    def test_a_body_is_known_by_its_500_and_only_that_one(self) -> None:
        faults = RequestFaults()
        assert not faults.known(b"body", _fault())
        faults.remember(b"body", RepeatedFault(_fault()))
        assert faults.known(b"body", _fault())
        assert not faults.known(b"body", _fault("another message"))  # a new fault: retried as any
        assert not faults.known(b"other body", _fault())

    def test_the_oldest_body_is_forgotten_past_the_bound(self) -> None:
        faults = RequestFaults(remembered=2)
        for body in (b"a", b"b", b"c"):
            faults.remember(body, RepeatedFault(_fault()))
        assert [faults.known(b, _fault()) for b in (b"a", b"b", b"c")] == [False, True, True]

    def test_a_check_is_due_when_distinct_bodies_meet_the_same_500_without_a_success(self) -> None:
        faults = RequestFaults(check_after=3)
        assert [faults.remember(b"a", RepeatedFault(_fault())) for _ in range(5)] == [False] * 5  # one body
        assert not faults.remember(b"b", RepeatedFault(_fault()))
        faults.succeeded()  # another request was answered: the upstream is healthy
        assert not faults.remember(b"c", RepeatedFault(_fault()))
        assert not faults.remember(b"d", RepeatedFault(_fault()))
        assert faults.remember(b"e", RepeatedFault(_fault()))
        assert not faults.remember(b"f", RepeatedFault(_fault()))  # counted again from there


class TestRefusal:
    def test_openai_shaped_is_passed_as_written_and_anything_else_put_in_that_shape(self) -> None:
        shaped = b'{"error": {"message": "too long", "type": "invalid_request_error"}}'
        assert refusal(400, shaped, upstream="m") == shaped
        assert b'"message":"upstream m refused the request: Bad Request"' in refusal(
            400, b"Bad Request", upstream="m"
        )
        assert b'"code":"upstream_refused"' in refusal(413, b'{"detail": "big"}', upstream="m")


class TestRequestOwn:
    def test_a_4xx_refusal_is_the_requests_and_a_transient_status_or_5xx_is_not(self) -> None:
        def own(status: int) -> bool:
            return request_own(status_error(status, f"HTTP {status}", backend="m"))

        assert [own(s) for s in (400, 404, 413, 422)] == [True] * 4
        assert [own(s) for s in (408, 409, 425, 429, 500, 503)] == [False] * 6
        assert not request_own(TimeoutError()) and not request_own(None)
