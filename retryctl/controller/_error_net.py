"""The faults of the network and of the HTTP clients tools use: the standard library's sockets, TLS,
``http.client``, ``urllib`` and ``asyncio``, and ``requests``, ``urllib3``, ``httpx``/``httpx2`` and
``aiohttp``, as a table from a class's name to its meaning.

A key is ``"<top-level package>.<class name>"`` (``requests.ReadTimeout`` is defined in
``requests.exceptions``; ``urllib.HTTPError`` in ``urllib.error``), matched against the names of an
exception's classes, most derived first (:func:`retryctl.controller._errors.rule_for`), so none of these
libraries is imported to recognise its errors. The classes follow the libraries' own retry logic: what
urllib3's ``Retry`` counts as a connect or read error is transient; a TLS certificate, a malformed URL or a
decoding failure will be the same next time.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable

from retryctl.controller._error_class import Classification, ErrorClass, Judge, make
from retryctl.controller._error_http import from_status, read_attr

__all__ = ["NET_ERRNOS", "NET_RULES", "Rule", "by_errno", "wrapped"]

T, V, X = ErrorClass.TRANSIENT, ErrorClass.VALIDATION, ErrorClass.TERMINAL

RuleFunc = Callable[[BaseException, Callable[[], float], Judge], Classification | None]
Rule = tuple[ErrorClass, str] | RuleFunc
"""A class and its reason, or a function of the exception, the clock and a :data:`Judge` for the
exception it wraps (None: not decided here)."""

NET_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "ECONNRESET",
        "ECONNREFUSED",
        "ECONNABORTED",
        "ETIMEDOUT",
        "EHOSTUNREACH",
        "EHOSTDOWN",
        "ENETUNREACH",
        "ENETDOWN",
        "ENETRESET",
        "EPIPE",
        "EAGAIN",
        "EADDRNOTAVAIL",  # out of ephemeral ports: clears as connections close
        "ENOBUFS",
        "EPROTO",
    )
    if hasattr(errno, name)
)
"""``OSError`` errnos of a network that may work on the next try; any other errno (a missing file, a
permission) is not a network fault and will not clear by itself."""


def by_errno(exc: BaseException, now: Callable[[], float], judge: Judge) -> Classification | None:
    """An ``OSError`` by its errno (None without one: nothing is known of it)."""
    code = read_attr(exc, "errno")
    if not isinstance(code, int):
        return None
    name = errno.errorcode.get(code, str(code))
    if code in NET_ERRNOS:
        return make(exc, T, f"network error {name}: {exc.args[-1] if exc.args else ''}".rstrip(": "))
    return make(exc, X, f"{name}: not a network fault, the same call fails again")


def _gaierror(exc: BaseException, now: Callable[[], float], judge: Judge) -> Classification:
    # A gaierror exists only once socket is loaded; the controller itself imports no I/O module.
    if read_attr(exc, "errno") == getattr(sys.modules.get("socket"), "EAI_AGAIN", None):
        return make(exc, T, "name resolution failed for now (EAI_AGAIN)")
    return make(exc, X, f"the host name does not resolve: {exc}")


def wrapped(attribute: str, fallback: ErrorClass, why: str) -> RuleFunc:
    """A rule for an error that wraps its cause in ``attribute`` (urllib's ``URLError.reason``,
    urllib3's ``MaxRetryError.reason``): judged by that cause when it is an exception, else ``fallback``."""

    def rule(exc: BaseException, now: Callable[[], float], judge: Judge) -> Classification:
        inner = read_attr(exc, attribute)
        if isinstance(inner, BaseException) and inner is not exc:
            found = judge(inner)
            return make(
                exc,
                found.error_class,
                f"{why}: {found.exception_type}: {found.reason}",
                retry_after_s=found.retry_after_s,
                status_code=found.status_code,
            )
        return make(exc, fallback, f"{why}: {inner}" if inner else why)

    return rule


def _urllib_http(exc: BaseException, now: Callable[[], float], judge: Judge) -> Classification | None:
    code = read_attr(exc, "code")
    headers = read_attr(exc, "headers") or read_attr(exc, "hdrs")
    if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
        return from_status(exc, now, code=code, headers=headers, api_code="")
    return None


def _status(exc: BaseException, now: Callable[[], float], judge: Judge) -> Classification | None:
    return from_status(exc, now)


def _aiohttp_status(exc: BaseException, now: Callable[[], float], judge: Judge) -> Classification | None:
    return from_status(exc, now, api_code="")  # its ``code`` is a deprecated alias of the status


_TIMED_OUT = (T, "the request timed out")
_NO_CONNECTION = (T, "the connection failed")
_CONNECTION_LOST = (T, "the connection broke before the response ended")
_TLS = (X, "TLS failed (a certificate or protocol mismatch), which the next try meets again")
_BAD_URL = (V, "the URL is malformed")

_STDLIB: dict[str, Rule] = {
    "socket.gaierror": _gaierror,
    "socket.herror": (X, "the address does not resolve"),
    "ssl.SSLEOFError": (T, "the TLS connection was cut"),
    "ssl.SSLZeroReturnError": (T, "the TLS connection was closed"),
    "ssl.SSLError": _TLS,
    "ssl.SSLCertVerificationError": (X, "the server's certificate does not verify"),
    "http.RemoteDisconnected": (T, "the server closed the connection without a response"),
    "http.IncompleteRead": _CONNECTION_LOST,
    "asyncio.IncompleteReadError": _CONNECTION_LOST,
    "urllib.HTTPError": _urllib_http,
    "urllib.ContentTooShortError": _CONNECTION_LOST,
    "urllib.URLError": wrapped("reason", X, "the URL could not be opened"),
}

_REQUESTS: dict[str, Rule] = {
    "requests.HTTPError": _status,
    "requests.ReadTimeout": (T, "no response within the read timeout"),
    "requests.ConnectTimeout": (T, "no connection within the connect timeout"),
    "requests.Timeout": _TIMED_OUT,
    "requests.SSLError": _TLS,
    "requests.ConnectionError": _NO_CONNECTION,
    "requests.ChunkedEncodingError": _CONNECTION_LOST,
    "requests.ContentDecodingError": (X, "the response body could not be decoded"),
    "requests.RetryError": (T, "the client's own retries ran out"),
    "requests.TooManyRedirects": (X, "too many redirects"),
    "requests.JSONDecodeError": (X, "the response body is not JSON"),
    "requests.InvalidJSONError": (V, "the request body cannot be sent as JSON"),
    "requests.URLRequired": _BAD_URL,
    "requests.MissingSchema": _BAD_URL,
    "requests.InvalidSchema": _BAD_URL,
    "requests.InvalidURL": _BAD_URL,
    "requests.InvalidHeader": (V, "a request header is malformed"),
}

_URLLIB3: dict[str, Rule] = {
    "urllib3.MaxRetryError": wrapped("reason", T, "urllib3's retries ran out"),
    "urllib3.ResponseError": (T, "too many error responses"),
    "urllib3.NameResolutionError": (T, "name resolution failed"),
    "urllib3.NewConnectionError": _NO_CONNECTION,
    "urllib3.TimeoutError": _TIMED_OUT,
    "urllib3.ProtocolError": _CONNECTION_LOST,
    "urllib3.IncompleteRead": _CONNECTION_LOST,
    "urllib3.InvalidChunkLength": _CONNECTION_LOST,
    "urllib3.ProxyError": (T, "the proxy failed"),
    "urllib3.EmptyPoolError": (T, "no connection free in the pool"),
    "urllib3.ClosedPoolError": (X, "the connection pool is closed"),
    "urllib3.SSLError": _TLS,
    "urllib3.DecodeError": (X, "the response body could not be decoded"),
    "urllib3.HostChangedError": (X, "the request went to another host than its pool's"),
    "urllib3.LocationValueError": _BAD_URL,
    "urllib3.URLSchemeUnknown": _BAD_URL,
    "urllib3.ProxySchemeUnknown": _BAD_URL,
    "urllib3.HeaderParsingError": (X, "the response headers could not be parsed"),
}

_AIOHTTP: dict[str, Rule] = {
    "aiohttp.ContentTypeError": (X, "the response is not of the content type expected"),
    "aiohttp.TooManyRedirects": (X, "too many redirects"),
    "aiohttp.ClientResponseError": _aiohttp_status,
    "aiohttp.ServerTimeoutError": _TIMED_OUT,
    "aiohttp.ServerDisconnectedError": (T, "the server closed the connection"),
    "aiohttp.ServerFingerprintMismatch": (X, "the server's certificate fingerprint does not match"),
    "aiohttp.ClientSSLError": _TLS,
    "aiohttp.ClientConnectorCertificateError": (X, "the server's certificate does not verify"),
    "aiohttp.ClientConnectionError": _NO_CONNECTION,
    "aiohttp.ClientPayloadError": _CONNECTION_LOST,
    "aiohttp.InvalidURL": _BAD_URL,
}


def _httpx(name: str) -> dict[str, Rule]:
    return {
        f"{name}.HTTPStatusError": _status,
        f"{name}.TimeoutException": _TIMED_OUT,
        f"{name}.UnsupportedProtocol": (X, "the request itself is malformed"),
        f"{name}.LocalProtocolError": (X, "the request itself is malformed"),
        f"{name}.TransportError": _NO_CONNECTION,
        f"{name}.InvalidURL": _BAD_URL,
        f"{name}.DecodingError": (X, "the response body could not be decoded"),
        f"{name}.TooManyRedirects": (X, "too many redirects"),
    }


NET_RULES: dict[str, Rule] = {
    **_STDLIB,
    **_REQUESTS,
    **_URLLIB3,
    **_AIOHTTP,
    **_httpx("httpx"),
    **_httpx("httpx2"),  # httpx's successor, the client the openai SDK uses
}
"""The table of this module (see its docstring)."""
