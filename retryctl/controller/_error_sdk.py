"""The faults of service SDKs: ``grpc`` status codes, ``botocore`` (AWS) error codes and connection errors,
and the ``openai`` and ``anthropic`` SDKs, as a table from a class's name to its meaning (keyed as in
:mod:`._error_net`; none of these packages is imported).

- gRPC: ``RpcError.code()`` is a ``StatusCode``. UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED and
  ABORTED are worth another try (gRPC's retry design and Google's AIP-194); INVALID_ARGUMENT and
  OUT_OF_RANGE are the request's fault; the rest (UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND,
  FAILED_PRECONDITION, UNIMPLEMENTED, INTERNAL, UNKNOWN, DATA_LOSS, CANCELLED...) will not change by
  themselves. A server's ``grpc-retry-pushback-ms`` trailer is its Retry-After.
- botocore: ``ClientError.response['Error']['Code']`` in botocore's own lists of throttling and transient
  codes (``botocore/retries/standard.py``) is transient, as is a 500/502/503/504 in
  ``ResponseMetadata.HTTPStatusCode``; expired or wrong credentials are terminal; other statuses mean what
  they mean in HTTP. Its connection errors and timeouts are transient.
- openai and anthropic (one code generator, one shape): a status error by its status (anthropic's 529,
  overloaded, is transient), timeouts and connection errors transient, a response that does not fit the
  SDK's schema terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from retryctl.controller._error_class import Classification, ErrorClass, Judge, make
from retryctl.controller._error_http import from_status, parse_retry_after, read_attr, status_class
from retryctl.controller._error_net import Rule

__all__ = ["BOTO_THROTTLING", "GRPC_CODES", "SDK_RULES"]

T, V, X = ErrorClass.TRANSIENT, ErrorClass.VALIDATION, ErrorClass.TERMINAL

GRPC_CODES: Mapping[str, ErrorClass] = {
    "UNAVAILABLE": T,
    "DEADLINE_EXCEEDED": T,
    "RESOURCE_EXHAUSTED": T,
    "ABORTED": T,
    "INVALID_ARGUMENT": V,
    "OUT_OF_RANGE": V,
}
"""gRPC status codes that are not terminal (any other code is)."""

BOTO_THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)
"""botocore's throttling error codes (``ThrottledRetryableChecker``)."""
_BOTO_TRANSIENT = frozenset({"RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete"})
_BOTO_TRANSIENT_STATUS = frozenset({500, 502, 503, 504})
_BOTO_CREDENTIALS = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidSignatureException",
        "AuthFailure",
        "AccessDenied",
        "AccessDeniedException",
    }
)


def _grpc(exc: BaseException, now: Callable[[], float], judge: Judge) -> Classification | None:
    code_of = read_attr(exc, "code")
    try:
        code = code_of() if callable(code_of) else code_of
    except Exception:  # an RpcError that is not a call (raised by hand): no status to read
        return None
    name = getattr(code, "name", None)
    if not isinstance(name, str):
        return None
    details = _call(exc, "details")
    why = f"gRPC {name}" + (f": {details}" if details else "")
    return make(exc, GRPC_CODES.get(name, X), why, retry_after_s=_pushback(exc))


def _call(exc: BaseException, method: str) -> object:
    found = read_attr(exc, method)
    try:
        return found() if callable(found) else found
    except Exception:
        return None


def _pushback(exc: BaseException) -> float | None:
    """The server's ``grpc-retry-pushback-ms`` trailer, in seconds."""
    trailers = _call(exc, "trailing_metadata")
    if not isinstance(trailers, tuple | list):
        return None
    for item in trailers:
        key, value = (item.key, item.value) if hasattr(item, "key") else tuple(item)[:2]
        if key == "grpc-retry-pushback-ms":
            return parse_retry_after({"retry-after-ms": value})
    return None


def _botocore(exc: BaseException, now: Callable[[], float], judge: Judge) -> Classification | None:
    response = read_attr(exc, "response")
    if not isinstance(response, Mapping):
        return None
    error = response.get("Error") or {}
    meta = response.get("ResponseMetadata") or {}
    code = error.get("Code") if isinstance(error, Mapping) else None
    status = meta.get("HTTPStatusCode") if isinstance(meta, Mapping) else None
    status = status if isinstance(status, int) and 100 <= status <= 599 else None
    headers = meta.get("HTTPHeaders") if isinstance(meta, Mapping) else None
    wait = None
    if isinstance(headers, Mapping):  # botocore's x-amz-retry-after is in milliseconds
        amz = headers.get("x-amz-retry-after")
        wait = parse_retry_after({"retry-after-ms": amz} if amz is not None else headers, now=now())
    said = f"AWS {code}" if code else "AWS error"
    if code in BOTO_THROTTLING:
        return make(exc, T, f"{said}: throttled", retry_after_s=wait, status_code=status)
    if code in _BOTO_TRANSIENT:
        return make(exc, T, f"{said}: the request timed out", retry_after_s=wait, status_code=status)
    if code in _BOTO_CREDENTIALS:
        return make(exc, X, f"{said}: credentials refused", status_code=status)
    if status is None:
        return make(exc, X, f"{said}: no status to judge it by") if code else None
    if status in _BOTO_TRANSIENT_STATUS:
        error_class, why = T, "server error"
    else:
        error_class, why = status_class(status)
    return make(exc, error_class, f"{said}, HTTP {status}: {why}", retry_after_s=wait, status_code=status)


def _status(exc: BaseException, now: Callable[[], float], judge: Judge) -> Classification | None:
    return from_status(exc, now)


def _stainless(name: str) -> dict[str, Rule]:
    """The rules of an SDK made by the openai/anthropic code generator."""
    return {
        f"{name}.APIStatusError": _status,
        f"{name}.APITimeoutError": (T, "the request timed out"),
        f"{name}.APIConnectionError": (T, "could not connect to the API"),
        f"{name}.APIResponseValidationError": (X, "the API response did not match its schema"),
    }


SDK_RULES: dict[str, Rule] = {
    "grpc.RpcError": _grpc,
    "grpc.FutureTimeoutError": (T, "the gRPC call timed out"),
    "grpc.FutureCancelledError": (X, "the gRPC call was cancelled"),
    "botocore.ClientError": _botocore,
    "botocore.ParamValidationError": (V, "the request's parameters do not fit the API"),
    "botocore.NoCredentialsError": (X, "no AWS credentials"),
    "botocore.PartialCredentialsError": (X, "incomplete AWS credentials"),
    "botocore.NoRegionError": (X, "no AWS region"),
    "botocore.SSLError": (X, "TLS failed (a certificate or protocol mismatch)"),
    "botocore.ConnectTimeoutError": (T, "no connection within the connect timeout"),
    "botocore.ReadTimeoutError": (T, "no response within the read timeout"),
    "botocore.EndpointConnectionError": (T, "could not connect to the endpoint"),
    "botocore.ConnectionClosedError": (T, "the connection was closed"),
    "botocore.ConnectionError": (T, "the connection failed"),
    "botocore.HTTPClientError": (T, "the HTTP connection failed"),
    **_stainless("openai"),
    "openai.LengthFinishReasonError": (V, "the output hit the token limit unfinished"),
    "openai.ContentFilterFinishReasonError": (X, "the content filter rejected the output"),
    "openai.WebSocketConnectionClosedError": (T, "the realtime connection closed"),
    **_stainless("anthropic"),
    "anthropic.RetryableError": (T, "raised to ask for a retry"),
    "anthropic.CredentialsError": (X, "no usable Anthropic credentials"),
}
"""The table of this module (see its docstring)."""
