"""Error classification against real exception instances of httpx, httpx2, openai, pydantic, asyncio."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from email.utils import formatdate
from pathlib import Path

import httpx
import httpx2
import openai
import pydantic
import pytest
from openai.types.chat import ChatCompletion

from retryctl.controller._errors import Classification, ErrorClass, classify, parse_retry_after
from retryctl.exceptions import BreakerOpen, BudgetExceeded, ConfigError, SemanticError

T, V, S, X = ErrorClass.TRANSIENT, ErrorClass.VALIDATION, ErrorClass.SEMANTIC, ErrorClass.TERMINAL
NOW = 1_700_000_000.0
URL = "https://api.example.test/v1/chat/completions"


def httpx_status(code: int, headers: dict[str, str] | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", URL)
    response = httpx.Response(code, headers=headers, request=request)
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as err:
        return err
    raise AssertionError(f"{code} did not raise")


def openai_status(
    cls: type[openai.APIStatusError],
    code: int,
    headers: dict[str, str] | None = None,
    body: object | None = None,
) -> openai.APIStatusError:
    request = httpx2.Request("POST", URL)
    response = httpx2.Response(code, headers=headers, request=request)
    return cls("error from the API", response=response, body=body)


def pydantic_error() -> pydantic.ValidationError:
    class Args(pydantic.BaseModel):
        city: str
        days: int

    try:
        Args.model_validate({"city": "Oslo", "days": "many"})
    except pydantic.ValidationError as err:
        return err
    raise AssertionError("no error")


def json_error() -> json.JSONDecodeError:
    try:
        json.loads('{"answer": ')
    except json.JSONDecodeError as err:
        return err
    raise AssertionError("no error")


def completion() -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "message": {"role": "assistant", "content": '{"a": '},
                }
            ],
        }
    )


def asyncio_timeout() -> BaseException:
    """A real timeout from asyncio.wait_for (a zero timeout fires without waiting)."""
    try:
        asyncio.run(asyncio.wait_for(asyncio.sleep(3600), timeout=0))
    except TimeoutError as err:
        return err
    raise AssertionError("no timeout")


def _req2() -> httpx2.Request:
    return httpx2.Request("POST", URL)


def _req() -> httpx.Request:
    return httpx.Request("POST", URL)


class Custom(Exception):
    """An exception type classify does not know."""


class WithStatus(Exception):
    """Another SDK's HTTP error: found by its ``status_code`` and ``response.headers``."""

    def __init__(self, status_code: int, headers: dict[str, str]) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.response = type("Resp", (), {"headers": headers})()


CASES: list[tuple[str, BaseException, ErrorClass, int | None]] = [
    # transient
    ("asyncio wait_for timeout", asyncio_timeout(), T, None),
    ("builtin timeout", TimeoutError("slow"), T, None),
    ("connection reset", ConnectionResetError(104, "reset"), T, None),
    ("httpx connect timeout", httpx.ConnectTimeout("t", request=_req()), T, None),
    ("httpx read timeout", httpx.ReadTimeout("t", request=_req()), T, None),
    ("httpx connect error", httpx.ConnectError("refused", request=_req()), T, None),
    ("httpx remote protocol", httpx.RemoteProtocolError("eof", request=_req()), T, None),
    ("httpx2 pool timeout", httpx2.PoolTimeout("t", request=_req2()), T, None),
    ("httpx 429", httpx_status(429), T, 429),
    ("httpx 408", httpx_status(408), T, 408),
    ("httpx 500", httpx_status(500), T, 500),
    ("httpx 503", httpx_status(503), T, 503),
    ("openai connection", openai.APIConnectionError(request=_req2()), T, None),
    ("openai timeout", openai.APITimeoutError(request=_req2()), T, None),
    ("openai 429", openai_status(openai.RateLimitError, 429), T, 429),
    ("openai 409", openai_status(openai.ConflictError, 409), T, 409),
    ("openai 500", openai_status(openai.InternalServerError, 500), T, 500),
    ("openai 529", openai_status(openai.InternalServerError, 529), T, 529),
    # validation
    ("pydantic", pydantic_error(), V, None),
    ("json", json_error(), V, None),
    ("type error", TypeError("f() got an unexpected keyword argument 'x'"), V, None),
    ("value error", ValueError("days must be positive"), V, None),
    ("httpx 400", httpx_status(400), V, 400),
    ("httpx 422", httpx_status(422), V, 422),
    ("openai 400", openai_status(openai.BadRequestError, 400), V, 400),
    ("openai 422", openai_status(openai.UnprocessableEntityError, 422), V, 422),
    ("openai length", openai.LengthFinishReasonError(completion=completion()), V, None),
    # semantic
    ("semantic", SemanticError(check="units", detail="km vs miles"), S, None),
    ("low confidence", SemanticError(check="confidence", confidence=0.31), S, None),
    # terminal
    ("httpx 401", httpx_status(401), X, 401),
    ("httpx 403", httpx_status(403), X, 403),
    ("httpx 404", httpx_status(404), X, 404),
    ("httpx 418", httpx_status(418), X, 418),
    ("httpx 501", httpx_status(501), X, 501),
    ("httpx bad scheme", httpx.UnsupportedProtocol("ftp", request=_req()), X, None),
    ("openai 401", openai_status(openai.AuthenticationError, 401), X, 401),
    ("openai 403", openai_status(openai.PermissionDeniedError, 403), X, 403),
    ("openai 404", openai_status(openai.NotFoundError, 404), X, 404),
    (
        "openai quota",
        openai_status(openai.RateLimitError, 429, body={"code": "insufficient_quota"}),
        X,
        429,
    ),
    ("openai content filter", openai.ContentFilterFinishReasonError(), X, None),
    ("breaker open", BreakerOpen(key="search", retry_at=5.0, failures=3), X, None),
    ("budget", BudgetExceeded(limit_name="usd", limit=1.0, value=1.2), X, None),
    ("config error", ConfigError(field="x", value=-1, problem="negative"), X, None),
    ("cancelled", asyncio.CancelledError(), X, None),
    ("keyboard interrupt", KeyboardInterrupt(), X, None),
    ("unknown", Custom("?"), X, None),
    ("unknown OSError", FileNotFoundError(2, "missing"), X, None),
]


class TestClassify:
    @pytest.mark.parametrize(("exc", "expected", "status"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
    def test_table(self, exc, expected, status):
        got = classify(exc, now=lambda: NOW)
        assert got.error_class is expected, got
        assert got.status_code == status
        assert got.reason
        assert got.retryable == (expected is T)

    def test_httpx_retry_after_seconds(self):
        got = classify(httpx_status(429, {"Retry-After": "7"}))
        assert (got.error_class, got.retry_after_s, got.status_code) == (T, 7.0, 429)

    def test_httpx_retry_after_http_date(self):
        date = formatdate(NOW + 120, usegmt=True)
        got = classify(httpx_status(503, {"Retry-After": date}), now=lambda: NOW)
        assert got.retry_after_s == pytest.approx(120.0)

    def test_openai_retry_after_ms_wins(self):
        exc = openai_status(openai.RateLimitError, 429, {"retry-after-ms": "1500", "retry-after": "9"})
        assert classify(exc).retry_after_s == 1.5

    def test_openai_retry_after_date(self):
        date = formatdate(NOW + 30, usegmt=True)
        exc = openai_status(openai.InternalServerError, 503, {"Retry-After": date})
        assert classify(exc, now=lambda: NOW).retry_after_s == pytest.approx(30.0)

    def test_server_can_overrule_with_x_should_retry(self):
        assert classify(httpx_status(400, {"x-should-retry": "true"})).error_class is T
        assert classify(httpx_status(503, {"x-should-retry": "false"})).error_class is X

    def test_duck_typed_status_from_another_sdk(self):
        got = classify(WithStatus(503, {"Retry-After": "2"}))
        assert (got.error_class, got.retry_after_s, got.status_code) == (T, 2.0, 503)

    def test_pydantic_reason_names_the_field(self):
        assert "days" in classify(pydantic_error()).reason

    def test_unknown_default_is_configurable(self):
        assert classify(Custom("?"), default=ErrorClass.TRANSIENT).error_class is T
        assert "unrecognised" in classify(Custom("?")).reason

    def test_an_unknown_wrapper_is_judged_by_its_cause(self):
        try:
            try:
                raise httpx.ConnectError("refused", request=_req())
            except httpx.ConnectError as inner:
                raise Custom("tool failed") from inner
        except Custom as outer:
            got = classify(outer)
        assert got.error_class is T
        assert "httpx.ConnectError" in got.reason

    def test_a_group_takes_its_worst_member(self):
        group = ExceptionGroup("tasks", [TimeoutError(), ValueError("bad")])
        assert classify(group).error_class is V
        worse = ExceptionGroup("tasks", [TimeoutError(), httpx_status(401)])
        assert classify(worse).error_class is X
        waits = ExceptionGroup(
            "tasks", [httpx_status(429, {"Retry-After": "3"}), httpx_status(503, {"Retry-After": "8"})]
        )
        assert (classify(waits).error_class, classify(waits).retry_after_s) == (T, 8.0)

    def test_exception_type_is_qualified(self):
        assert classify(httpx.ReadTimeout("t", request=_req())).exception_type == "httpx.ReadTimeout"
        assert classify(TimeoutError()).exception_type == "TimeoutError"

    def test_is_frozen_data(self):
        got = classify(TimeoutError())
        assert isinstance(got, Classification)
        with pytest.raises(AttributeError):
            got.reason = "x"  # type: ignore[misc]


class TestParseRetryAfter:
    @pytest.mark.parametrize(
        ("headers", "expected"),
        [
            ({"retry-after": "12"}, 12.0),
            ({"Retry-After": "0.5"}, 0.5),
            ({"retry-after-ms": "250"}, 0.25),
            ({"retry-after": formatdate(NOW + 60, usegmt=True)}, 60.0),
            ({"retry-after": formatdate(NOW - 60, usegmt=True)}, 0.0),
            ({"retry-after": "soon"}, None),
            ({"retry-after": "-3"}, None),
            ({"retry-after": "inf"}, None),
            ({}, None),
        ],
    )
    def test_forms(self, headers, expected):
        got = parse_retry_after(httpx.Headers(headers), now=NOW)
        assert got == (None if expected is None else pytest.approx(expected))

    def test_plain_dict_is_read_case_insensitively(self):
        assert parse_retry_after({"Retry-After": "4"}, now=NOW) == 4.0


def test_controller_imports_neither_openai_nor_langgraph_nor_httpx():
    code = (
        "import sys\n"
        "import retryctl.controller._errors, retryctl.controller._ledger\n"
        "import retryctl.controller._breaker, retryctl.controller._pricing\n"
        "print(sorted(m for m in ('openai', 'langgraph', 'httpx', 'httpx2') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[]"


class TestDeclaredErrorClass:
    def test_a_retryctl_error_that_declares_its_class_keeps_it_and_its_http_facts(self):
        from retryctl.exceptions import RuntimeFailure

        class RateLimited(RuntimeFailure):
            error_class = "transient"

            def __init__(self) -> None:
                self.status_code = 429
                self.retry_after_s = 1.5
                super().__init__("slow down")

        found = classify(RateLimited())
        assert found.error_class is ErrorClass.TRANSIENT
        assert found.retry_after_s == 1.5 and found.status_code == 429

    def test_an_undeclared_retryctl_error_stays_terminal(self):
        from retryctl.exceptions import RuntimeFailure

        assert classify(RuntimeFailure("odd")).error_class is ErrorClass.TERMINAL
