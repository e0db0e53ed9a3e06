"""The errors a model backend raises: every failure of a call ends in one of these, never in a crash.

    RuntimeFailure                      (retryctl.exceptions)
    └── BackendError                    a model call failed; carries ``status_code`` and ``retry_after_s``
        ├── TransientBackendError       worth retrying: 429, 5xx, timeout, dropped connection
        │   ├── BackendTimeout          no complete answer within the timeout
        │   └── ServerFault             an HTTP 500, its whole message kept to compare with a retry's
        ├── MalformedResponse           the server answered, but not with a usable completion
        └── TerminalBackendError        retrying the same call cannot help: 4xx, auth, unknown model
            ├── UnclassifiedBackendError  an error the backend does not know (the controller judges its cause)
            ├── RepeatedFault           a 500 the same request met again word for word: the request's own
            ├── UnsupportedParameter    the server refuses a parameter it does not support (any status)
            ├── BackendUnavailable      the backend cannot run here (e.g. the ``local`` extra is missing)
            └── ReplayExhausted         a replay backend has no recorded sample left for a question

``error_class`` is the class's verdict on retrying (``"transient"``, ``"validation"`` for a malformed
response, ``"terminal"``), which ``retryctl.controller.classify`` honours without importing this module;
``status_code`` and ``retry_after_s`` mirror the fields of HTTP errors for the same reason.
"""

from __future__ import annotations

from typing import ClassVar

from retryctl.exceptions import RuntimeFailure

__all__ = [
    "OWN_STATUS",
    "BackendError",
    "BackendTimeout",
    "BackendUnavailable",
    "MalformedResponse",
    "RepeatedFault",
    "ReplayExhausted",
    "ServerFault",
    "TerminalBackendError",
    "TransientBackendError",
    "UnsupportedParameter",
]


class BackendError(RuntimeFailure):
    """A model call failed.

    ``backend`` names the backend (and model), ``status_code`` is the HTTP status when there was one,
    ``retry_after_s`` the server's ``Retry-After`` in seconds when it sent one, ``attempts`` how many
    tries were made before giving up.
    """

    error_class: ClassVar[str | None] = "terminal"
    """``"transient"``, ``"validation"`` (malformed) or ``"terminal"``: what retrying can achieve."""

    def __init__(
        self,
        message: str,
        *,
        backend: str,
        status_code: int | None = None,
        retry_after_s: float | None = None,
        attempts: int = 1,
    ) -> None:
        self.message = message
        self.backend = backend
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        self.attempts = attempts
        details = [f"backend={backend}"]
        if status_code is not None:
            details.append(f"status={status_code}")
        if retry_after_s is not None:
            details.append(f"retry_after={retry_after_s:g}s")
        if attempts != 1:
            details.append(f"attempts={attempts}")
        super().__init__(f"{message} ({', '.join(details)})")

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed if tried again."""
        return self.error_class == "transient"


class TransientBackendError(BackendError):
    """A fault that a later attempt may not meet: rate limit, server error, timeout, lost connection."""

    error_class: ClassVar[str | None] = "transient"


class BackendTimeout(TransientBackendError):
    """The server did not answer completely within the timeout."""


OWN_STATUS = 500
"""The one status a request's own failure may hide behind. The other 5xx are left to the retries and
the breaker: 502, 503 and 504 are a proxy's or a server's word on its own state, never a request's."""


class ServerFault(TransientBackendError):
    """An HTTP 500, with the server's whole message (``detail``) to compare with the next try's.

    Transient at first: a server that is failing answers with faults that come and go. The same
    request meeting the same 500 again, word for word, is :class:`RepeatedFault`."""

    def __init__(
        self, message: str, *, backend: str, detail: str, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, backend=backend, status_code=OWN_STATUS, retry_after_s=retry_after_s)
        self.detail = detail

    def repeats(self, previous: BaseException | None) -> bool:
        """Whether ``previous`` (the same request's last try) failed with this very 500."""
        return isinstance(previous, ServerFault) and previous.detail == self.detail


class MalformedResponse(BackendError):
    """The server answered, but the body is not a usable completion (garbage, wrong schema, no choices).

    ``body`` keeps the first 500 characters of what was received, for the decision log.
    """

    error_class: ClassVar[str | None] = "validation"

    def __init__(
        self,
        message: str,
        *,
        backend: str,
        body: str = "",
        status_code: int | None = None,
        attempts: int = 1,
    ) -> None:
        self.body = body[:500]
        super().__init__(message, backend=backend, status_code=status_code, attempts=attempts)


class TerminalBackendError(BackendError):
    """A failure that the same call will meet again: bad request, authentication, unknown model."""


class UnclassifiedBackendError(TerminalBackendError):
    """A failure of a model's own client that the backend does not know (a LangChain chat model of any
    provider raises its SDK's errors): terminal to the backend's own retries, but it declares no
    ``error_class``, so ``retryctl.controller.classify`` judges it by its cause (an anthropic connection
    error, a gRPC UNAVAILABLE, a ``requests`` timeout are transient)."""

    error_class: ClassVar[str | None] = None


class RepeatedFault(TerminalBackendError):
    """A 500 that the same request met again, word for word: the request's own, not the server's health.

    llama.cpp's Python server answers a valid tool-call conversation with a 500 listing its own
    validation errors, every time; retrying it only costs time, and counting it against the server's
    breaker would let one caller's content take the server from every other caller. So the retries
    stop at the second identical answer (:func:`~retryctl.models._retry.call_with_retries`), and this
    error says so. Terminal: the same request meets it again."""

    def __init__(self, fault: ServerFault) -> None:
        super().__init__(
            fault.message, backend=fault.backend, status_code=OWN_STATUS, attempts=fault.attempts
        )
        self.detail = fault.detail


class UnsupportedParameter(TerminalBackendError):
    """The server refused a request parameter it does not support: a capability error, not a fault.

    Some servers answer it with a 5xx (llama.cpp's server validates the body inside its handler), so the
    status alone would call it transient. It is never retried as sent: the OpenAI backend learns it
    (see :class:`~retryctl.models.ServerCapabilities`) and falls back at once to a request without it;
    it reaches the caller only when no fallback is left. ``parameter`` names the refused parameter as
    the request sent it (``"response_format"``, ``"logprobs"``...).
    """

    def __init__(
        self,
        message: str,
        *,
        backend: str,
        parameter: str,
        status_code: int | None = None,
        attempts: int = 1,
    ) -> None:
        self.parameter = parameter
        super().__init__(message, backend=backend, status_code=status_code, attempts=attempts)


class BackendUnavailable(TerminalBackendError):
    """The backend cannot run in this environment; the message says what to install."""


class ReplayExhausted(TerminalBackendError):
    """A replay backend was asked for more samples of a question than its bank recorded."""
