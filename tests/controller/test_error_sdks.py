"""classify on the real exceptions of service SDKs: gRPC (a real channel to a closed port, a real server
aborting with each status code), botocore (a real client against the local server, and ``ClientError`` of
the error responses AWS sends) and the anthropic SDK (a real client against the local server, 529 too)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import botocore.config
import botocore.exceptions
import botocore.session
import grpc
import grpc.aio
import pytest

from retryctl.controller import ErrorClass, classify
from tests.controller._clients import FAULTS, TIMEOUT_S, Fault, base_url, closed_port, raised
from tests.models._fault_server import FaultServer, Reply, status

T, V, X = ErrorClass.TRANSIENT, ErrorClass.VALIDATION, ErrorClass.TERMINAL


@pytest.fixture(scope="module")
def grpc_server() -> Iterator[str]:
    """A real gRPC server on 127.0.0.1 whose one method aborts with the status code it is sent."""

    def fail(request: bytes, context: grpc.ServicerContext) -> bytes:
        name = request.decode()
        if name == "slow":
            time.sleep(2)
            return b"late"
        if name == "RESOURCE_EXHAUSTED":
            context.set_trailing_metadata((("grpc-retry-pushback-ms", "1500"),))
        context.abort(grpc.StatusCode[name], f"scripted {name}")
        raise AssertionError("abort returns by raising")

    handler = grpc.method_handlers_generic_handler(
        "test.Faults", {"Fail": grpc.unary_unary_rpc_method_handler(fail)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


class TestGrpc:
    def _call(self, target: str, request: bytes, timeout: float = 5.0) -> BaseException:
        with grpc.insecure_channel(target) as channel:
            fail = channel.unary_unary("/test.Faults/Fail")
            return raised(lambda: fail(request, timeout=timeout))

    def test_a_closed_port_is_unavailable_and_transient(self) -> None:
        exc = self._call(f"127.0.0.1:{closed_port()}", b"x", timeout=2.0)
        assert isinstance(exc, grpc.RpcError) and exc.code() is grpc.StatusCode.UNAVAILABLE
        got = classify(exc)
        assert got.error_class is T and "UNAVAILABLE" in got.reason

    def test_a_deadline_is_transient(self, grpc_server: str) -> None:
        exc = self._call(grpc_server, b"slow", timeout=TIMEOUT_S)
        assert isinstance(exc, grpc.RpcError) and exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert classify(exc).error_class is T

    @pytest.mark.parametrize(
        ("code", "expected"),
        [
            ("UNAVAILABLE", T),
            ("RESOURCE_EXHAUSTED", T),
            ("ABORTED", T),
            ("INVALID_ARGUMENT", V),
            ("OUT_OF_RANGE", V),
            ("UNAUTHENTICATED", X),
            ("PERMISSION_DENIED", X),
            ("NOT_FOUND", X),
            ("FAILED_PRECONDITION", X),
            ("UNIMPLEMENTED", X),
            ("INTERNAL", X),
        ],
    )
    def test_each_status_code(self, grpc_server: str, code: str, expected: ErrorClass) -> None:
        exc = self._call(grpc_server, code.encode())
        assert isinstance(exc, grpc.RpcError) and exc.code().name == code
        got = classify(exc)
        assert got.error_class is expected, got
        assert f"scripted {code}" in got.reason
        assert got.retry_after_s == (1.5 if code == "RESOURCE_EXHAUSTED" else None)

    def test_the_aio_client(self) -> None:
        async def call() -> None:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{closed_port()}") as channel:
                await channel.unary_unary("/test.Faults/Fail")(b"x", timeout=2.0)

        exc = raised(lambda: asyncio.run(call()))
        assert isinstance(exc, grpc.aio.AioRpcError)
        assert classify(exc).error_class is T


def _aws_error(
    code: str, http: int, headers: dict[str, str] | None = None
) -> botocore.exceptions.ClientError:
    """A ClientError as botocore raises it from an AWS error response."""
    response: Any = {
        "Error": {"Code": code, "Message": f"scripted {code}"},
        "ResponseMetadata": {"RequestId": "r1", "HTTPStatusCode": http, "HTTPHeaders": headers or {}},
    }
    return botocore.exceptions.ClientError(response, "Converse")


class TestBotocore:
    @pytest.mark.parametrize(
        ("code", "http", "expected"),
        [
            ("ThrottlingException", 400, T),
            ("Throttling", 400, T),
            ("TooManyRequestsException", 429, T),
            ("RequestLimitExceeded", 503, T),
            ("SlowDown", 503, T),
            ("ProvisionedThroughputExceededException", 400, T),
            ("RequestTimeout", 400, T),
            ("InternalServerException", 500, T),
            ("ServiceUnavailableException", 503, T),
            ("ModelNotReadyException", 502, T),
            ("ValidationException", 400, V),
            ("ExpiredTokenException", 400, X),
            ("AccessDeniedException", 403, X),
            ("ResourceNotFoundException", 404, X),
            ("NotImplemented", 501, X),
        ],
    )
    def test_client_error_codes(self, code: str, http: int, expected: ErrorClass) -> None:
        got = classify(_aws_error(code, http))
        assert got.error_class is expected, got
        assert got.status_code == http and code in got.reason

    def test_x_amz_retry_after_is_the_wait(self) -> None:
        got = classify(_aws_error("ThrottlingException", 400, {"x-amz-retry-after": "2500"}))
        assert got.retry_after_s == 2.5

    def _client(self, url: str) -> Any:
        config = botocore.config.Config(
            connect_timeout=TIMEOUT_S, read_timeout=TIMEOUT_S, retries={"total_max_attempts": 1}
        )
        return botocore.session.get_session().create_client(
            "dynamodb",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
            config=config,
        )

    @pytest.mark.parametrize(
        "fault",
        [
            *(f for f in FAULTS if not f.http),
            Fault("503", lambda: status(503), "transient", 503),
            Fault("throttled", lambda: _dynamo_error(400, "ThrottlingException"), "transient", 400),
            Fault("invalid", lambda: _dynamo_error(400, "ValidationException"), "validation", 400),
            Fault("denied", lambda: _dynamo_error(400, "UnrecognizedClientException"), "terminal", 400),
        ],
        ids=lambda f: f.name,
    )
    def test_a_real_client(self, fault_server: FaultServer, fault: Fault) -> None:
        client = self._client(base_url(fault_server, fault))
        exc = raised(client.list_tables)
        assert isinstance(exc, botocore.exceptions.BotoCoreError | botocore.exceptions.ClientError)
        got = classify(exc)
        assert got.error_class.value == fault.error_class, got
        assert got.status_code == fault.status


def _dynamo_error(http: int, code: str) -> Reply:
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "scripted"})
    return Reply(
        "status", status=http, body=body.encode(), headers={"Content-Type": "application/x-amz-json-1.0"}
    )


class TestAnthropic:
    @pytest.mark.parametrize(
        "fault", [*FAULTS, Fault("529", lambda: status(529), "transient", 529)], ids=lambda f: f.name
    )
    def test_a_real_client(self, fault_server: FaultServer, fault: Fault) -> None:
        client = anthropic.Anthropic(
            base_url=base_url(fault_server, fault), api_key="sk-test", max_retries=0, timeout=TIMEOUT_S
        )
        exc = raised(
            lambda: client.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        )
        assert isinstance(exc, anthropic.APIError)
        got = classify(exc)
        assert got.error_class.value == fault.error_class, (type(exc), got)
        assert got.status_code == fault.status and got.retry_after_s == fault.retry_after_s
        if fault.name == "529":
            assert isinstance(exc, anthropic.OverloadedError) and "overloaded" in got.reason
