"""The HTTP facts an exception carries, read duck-typed: its status, its headers, the wait it asks for.

Any response-like object will do: ``exc.status_code`` or ``exc.status`` (aiohttp), else
``exc.response.status_code`` or ``exc.response.status`` (requests, httpx, the openai and anthropic SDKs);
headers from ``exc.headers`` or ``exc.hdrs`` (urllib), else ``exc.response.headers``. What a status means is
one small table, as in urllib3's ``Retry``: 408/409/425/429 and 5xx (but 501/505) are worth another try,
400/413/422 are the request's fault, the rest will not change; the server may overrule the table with
``x-should-retry``, and says how long to wait with ``retry-after-ms`` or ``Retry-After``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime

from retryctl.controller._error_class import Classification, ErrorClass, make

__all__ = ["from_status", "header", "parse_retry_after", "read_attr", "status_and_headers"]

_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_VALIDATION_STATUS = frozenset({400, 413, 422})
_PERMANENT_5XX = frozenset({501, 505})
_UNSUPPORTED_CODES = frozenset({"unsupported_parameter", "unsupported_value"})
"""The OpenAI API's ``code`` for a parameter (or value) the model does not take."""


def read_attr(obj: object, name: str) -> object:
    """``getattr(obj, name, None)``, also when the attribute is a property that raises (httpx's
    ``request`` on an error made without one raises ``RuntimeError``)."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _code(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def status_and_headers(exc: BaseException) -> tuple[int | None, object | None]:
    """The HTTP status and the headers ``exc`` carries (see the module docstring), each or both None."""
    response = read_attr(exc, "response")
    code = _code(read_attr(exc, "status_code")) or _code(read_attr(exc, "status"))
    if code is None and response is not None:
        code = _code(read_attr(response, "status_code")) or _code(read_attr(response, "status"))
    headers = read_attr(exc, "headers")
    if headers is None:
        headers = read_attr(exc, "hdrs")
    if headers is None and response is not None:
        headers = read_attr(response, "headers")
    return code, headers


def from_status(
    exc: BaseException,
    now: Callable[[], float],
    *,
    code: int | None = None,
    headers: object | None = None,
    api_code: object = None,
) -> Classification | None:
    """Classify ``exc`` by its HTTP status (``code``, else read from ``exc``), or None without one."""
    if code is None:
        code, found = status_and_headers(exc)
        headers = found if headers is None else headers
    if code is None:
        return None
    if api_code is None:
        api_code = read_attr(exc, "code")  # the OpenAI API's error code, e.g. "insufficient_quota"
    wait = parse_retry_after(headers, now=now()) if headers is not None else None
    error_class, why = status_class(code, api_code)
    should_retry = header(headers, "x-should-retry") if headers is not None else None
    if should_retry == "true" and error_class is not ErrorClass.TRANSIENT:
        error_class, why = ErrorClass.TRANSIENT, f"{why}, but the server asked for a retry"
    elif should_retry == "false" and error_class is ErrorClass.TRANSIENT:
        error_class, why = ErrorClass.TERMINAL, f"{why}, but the server said not to retry"
    return make(exc, error_class, f"HTTP {code}: {why}", retry_after_s=wait, status_code=code)


def status_class(code: int, api_code: object = None) -> tuple[ErrorClass, str]:
    """What HTTP ``code`` (with the API's own error ``api_code``, if any) means, and why."""
    if code == 429 and api_code == "insufficient_quota":
        return ErrorClass.TERMINAL, "the account's quota is spent"
    if api_code in _UNSUPPORTED_CODES:
        # A capability error: neither a retry nor feedback to the model changes what the server takes.
        # (retryctl's own OpenAI backend reads any body for these and steps around them itself.)
        return ErrorClass.TERMINAL, "the server does not support a parameter of the request"
    if code == 429:
        return ErrorClass.TRANSIENT, "rate limited"
    if code in _TRANSIENT_STATUS:
        return ErrorClass.TRANSIENT, "the server may accept it later"
    if code in _VALIDATION_STATUS:
        return ErrorClass.VALIDATION, "the request was rejected as invalid"
    if code in (401, 403):
        return ErrorClass.TERMINAL, "not authenticated or not permitted"
    if code == 404:
        return ErrorClass.TERMINAL, "not found"
    if code == 529:  # Anthropic's "overloaded"
        return ErrorClass.TRANSIENT, "the server is overloaded"
    if code >= 500 and code not in _PERMANENT_5XX:
        return ErrorClass.TRANSIENT, "server error"
    return ErrorClass.TERMINAL, "the server will give the same answer again"


def header(headers: object, name: str) -> str | None:
    """Header ``name`` (lower case) of any mapping-like ``headers``, stripped and lower-cased."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    try:
        value = get(name)
    except Exception:  # a get() of another signature
        return None
    if value is None and isinstance(headers, dict):  # a plain dict is case-sensitive
        value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    return None if value is None else str(value).strip().lower()


def parse_retry_after(headers: object, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date), or None.

    ``now`` (Unix seconds, default ``time.time()``) is what an HTTP date is measured from; a date in
    the past means 0. Malformed or negative values are ignored.
    """
    millis = _number(header(headers, "retry-after-ms"))
    if millis is not None:
        return millis / 1000
    raw = header(headers, "retry-after")
    if raw is None:
        return None
    seconds = _number(raw)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
