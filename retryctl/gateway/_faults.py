"""Which of an upstream's failures are its health, and which are one request's own.

The upstream's breaker protects every client from an upstream that is failing; one client's requests
must not take the upstream from the others. So a failure of a proxied request counts against the
breaker only when it says something of the upstream's health: a connection refused or reset, a
timeout, 502, 503, 504, 429, a 5xx that differs from one try to the next. A failure that is the
request's own is not retried and not counted:

- a 4xx: the upstream refused the request, and says why (passed back to its client);
- a 500 that the same body meets again word for word on its retry. llama.cpp's Python server answers a
  valid tool-call conversation (assistant ``content: null`` with ``tool_calls``, then a ``tool``
  message) with a 500 listing its own validation errors, every time; a server that is failing answers
  with faults that come and go. The transport retries tell the two apart
  (:class:`~retryctl.models.ServerFault`, :class:`~retryctl.models.RepeatedFault`, raised by
  :func:`~retryctl.models._retry.call_with_retries` for the proxy and for the OpenAI backend that
  adaptive requests sample through alike). A proxied body's fingerprint is remembered
  (:class:`RequestFaults`), so the same body sent again is known at its first 500 and costs one
  upstream call, not a retry.

One rule keeps that from hiding an upstream that fails every request alike (an engine that died and
answers anything with the same 500): once ``check_after`` different bodies met the same 500 with no
request succeeding between, the gateway asks the upstream a minimal request of its own (one token,
:data:`CHECK_BODY`). If that succeeds, the 500s were the requests' own; if it fails, they are the
upstream's, and they count until a request succeeds again. Adaptive requests share the rule: their
500s repeated word for word are remembered here too (by their messages), and their successes clear it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import TypeGuard

import orjson

from retryctl.gateway._errors import ApiError
from retryctl.models import BackendError
from retryctl.models._errors import OWN_STATUS, RepeatedFault, ServerFault, UnsupportedParameter
from retryctl.models._openai_wire import detail_of

__all__ = [
    "CHECK_BODY",
    "OWN_STATUS",
    "RepeatedFault",
    "RequestFaults",
    "ServerFault",
    "detail_of",
    "message_of",
    "own_500",
    "refusal",
    "refused_request",
    "request_own",
]


def message_of(raw: bytes) -> str:
    """:func:`detail_of` cut to one short line, for messages."""
    return detail_of(raw)[:200]


def _fingerprint(content: bytes) -> bytes:
    return hashlib.blake2b(content, digest_size=16).digest()


CHECK_BODY: dict[str, object] = {"messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1}
"""The gateway's own request when it must tell a request's 500 from the upstream's (``model`` added)."""


class RequestFaults:
    """What one worker has learnt of 500s that are requests' own: the bodies that met one (the last
    ``remembered``, by fingerprint) and, since the last success, which bodies met each message."""

    def __init__(self, *, remembered: int = 1024, check_after: int = 3) -> None:
        self._known: OrderedDict[bytes, str] = OrderedDict()
        self._remembered = remembered
        self._check_after = check_after
        self._since_success: dict[str, set[bytes]] = {}
        self.suspect = False
        """A check failed: the upstream answers everything alike, so repeated 500s count until a
        request succeeds."""

    def known(self, content: bytes, fault: ServerFault) -> bool:
        """Whether ``content`` met this very 500 before: it is its own, and needs no retry to tell."""
        if not self._known:
            return False
        return self._known.get(_fingerprint(content)) == fault.detail

    def remember(self, content: bytes, fault: RepeatedFault) -> bool:
        """Note that ``content`` met ``fault`` twice; ``True`` when a check of the upstream is due
        (``check_after`` bodies met the same 500 since the last success)."""
        key = _fingerprint(content)
        self._known[key] = fault.detail
        self._known.move_to_end(key)
        while len(self._known) > self._remembered:
            self._known.popitem(last=False)
        if len(self._since_success) >= self._remembered:  # messages that quote each body: keep it bounded
            self._since_success.clear()
        bodies = self._since_success.setdefault(fault.detail, set())
        bodies.add(key)
        if len(bodies) >= self._check_after:
            bodies.clear()  # the next check is due after as many new bodies again
            return True
        return False

    def succeeded(self) -> None:
        """A request succeeded: the upstream is healthy, whatever the 500s before it said."""
        if self._since_success or self.suspect:
            self._since_success.clear()
            self.suspect = False


def refusal(status: int, raw: bytes, *, upstream: str) -> bytes:
    """An upstream's 4xx for its caller: as the upstream wrote it when that is OpenAI's error shape
    (the SDKs read its fields), else the same status and message in that shape."""
    try:
        found = orjson.loads(raw)
        shaped = isinstance(found, dict) and isinstance(found.get("error"), dict)
        shaped = shaped and isinstance(found["error"].get("message"), str)
    except orjson.JSONDecodeError:
        shaped = False
    if shaped:
        return raw
    refused = ApiError(
        status, f"upstream {upstream} refused the request: {message_of(raw)}", code="upstream_refused"
    )
    return orjson.dumps(refused.body())


def refused_request(fault: BackendError, *, upstream: str) -> ApiError:
    """What a 500 that is the request's own becomes (:func:`own_500`): a 502 (the upstream failed, not
    the gateway, and not provably the caller) that says so, so that its client does not wait on a
    breaker for it."""
    if isinstance(fault, UnsupportedParameter):  # the server's validation named the request's field
        why = f"{fault.message}, a refusal of the request's {fault.parameter!r} as sent"
    else:
        why = f"{fault.message}, the same on a second try of the same body"
    return ApiError(
        502,
        f"upstream {upstream} refused this request: {why}. The failure is this request's own (its "
        "content), not the upstream's health: it is not retried and not counted against the upstream's "
        "breaker",
        type="upstream_error",
        code="upstream_refused_request",
    )


def own_500(exc: BaseException | None) -> TypeGuard[BackendError]:
    """Whether ``exc`` is a 5xx that is the request's own: a 500 it met twice word for word
    (:class:`RepeatedFault`), or a 5xx whose body names a field of the request the server refused
    (:class:`UnsupportedParameter` with nothing left to fall back on: llama.cpp's server lists its
    validation errors of a tool-call conversation's ``messages``, and the OpenAI backend reads them)."""
    if isinstance(exc, RepeatedFault):
        return True
    return isinstance(exc, UnsupportedParameter) and (exc.status_code or 0) >= OWN_STATUS


def request_own(exc: BaseException | None) -> bool:
    """Whether an upstream's error is the request's own, never a fault of the upstream's health: a
    refusal (a 4xx other than the transient 408, 409, 425 and 429), or a 5xx of its own
    (:func:`own_500`; a :class:`RepeatedFault` unless :class:`RequestFaults` finds the upstream fails
    everything alike, which its caller asks)."""
    if own_500(exc):
        return True
    if not isinstance(exc, BackendError) or exc.status_code is None:
        return False
    return 400 <= exc.status_code < 500 and not exc.retryable
