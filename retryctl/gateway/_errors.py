"""Errors the gateway answers with, in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Clients of the OpenAI API (the ``openai`` SDK, LangChain's ``ChatOpenAI``) read these fields and raise
their own typed errors from the status (400 ``BadRequestError``, 404 ``NotFoundError``, 429
``RateLimitError``, 5xx ``InternalServerError``), so every refusal the gateway makes is one of them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.responses import Response

from retryctl.controller import classify
from retryctl.models import BackendError, BackendTimeout

__all__ = ["ApiError", "from_fault", "from_validation"]


class ApiError(Exception):
    """One error response: its HTTP ``status`` and the four fields of OpenAI's error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, Any]:
        """The JSON body."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> Response:
        """The response to send."""
        headers: dict[str, str] = {}
        if self.retry_after_s is not None:
            # Whole seconds, rounded up: a client that waits what it is told must not come back early.
            headers["Retry-After"] = str(max(1, math.ceil(self.retry_after_s)))
        return Response(
            orjson.dumps(self.body()), status_code=self.status, media_type="application/json", headers=headers
        )


def _param(loc: tuple[int | str, ...]) -> str:
    """A pydantic location as OpenAI names a parameter: ``messages[0].role``, ``retryctl.budget.samples``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def from_validation(
    exc: ValidationError, *, prefix: tuple[int | str, ...] = (), renamed: Mapping[str, str] | None = None
) -> ApiError:
    """The first problem pydantic found, as a 400 naming the parameter and the value given
    (``renamed``: the names a model's fields go by in the request)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = tuple((renamed or {}).get(p, p) if isinstance(p, str) else p for p in first["loc"])
    problem = str(first["msg"]).removeprefix("Value error, ")
    given = first.get("input")
    # A value none of a union's types took (``stop``: a string or a list of strings): pydantic tells
    # each type's error under the type's name; the caller is told the field and the types it takes.
    # (A dict's key can look like a type's name: a union fails once per member, so two at least.)
    label = next((i for i, p in enumerate(loc) if isinstance(p, str) and _UNION_LABEL.match(p)), None)
    if label is not None:
        field = first["loc"][:label]
        kinds = [str(e["loc"][label]) for e in errors if e["loc"][:label] == field and len(e["loc"]) > label]
        kinds = list(dict.fromkeys(k for k in kinds if _UNION_LABEL.match(k)))
        if len(kinds) >= 2:
            loc = loc[:label]
            problem = "must be " + " or ".join(kinds)
    param = _param((*prefix, *loc))
    shown = "" if first["type"] == "missing" else f" (got {_short(given)})"
    return ApiError(400, f"invalid '{param}': {problem}{shown}", param=param, code="invalid_value")


_UNION_LABEL = re.compile(r"^(str|int|float|bool|none|(list|dict|tuple)\[.*\])$")
"""How pydantic names a member of a union in an error's location (never a request field's name)."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# What a fault of the upstream that the controller's retries did not get past becomes for the caller:
# its wait (a timeout) 504; a refusal to take more (429) 429 with the upstream's Retry-After; a request
# the upstream refused (another 4xx) the same status, since retrying it cannot help; anything else (a
# 5xx, a dropped connection, a body that is not a completion) 502.
def from_fault(exc: BaseException, *, upstream: str) -> ApiError:
    """An upstream failure as the gateway answers it."""
    reason = classify(exc).reason
    message = f"upstream {upstream}: {reason}"
    if isinstance(exc, BackendTimeout | TimeoutError):
        return ApiError(504, message, type="upstream_timeout", code="upstream_timeout")
    status = exc.status_code if isinstance(exc, BackendError) else None
    if status == 429:
        retry_after = exc.retry_after_s if isinstance(exc, BackendError) else None
        return ApiError(
            429, message, type="rate_limit_error", code="upstream_rate_limited", retry_after_s=retry_after
        )
    if status is not None and 400 <= status < 500:
        return ApiError(status, message, code="upstream_refused")
    return ApiError(502, message, type="upstream_error", code="upstream_error")
