"""What an OpenAI-compatible server can serve: capability errors told from faults, and remembered.

Servers that call themselves OpenAI-compatible each take a different subset of the API. One that does
not take a parameter says so in its error body, under whatever status it picks: llama.cpp's server
answers ``response_format: {"type": "json_schema"}`` with HTTP 500 and a pydantic error, the OpenAI API
with 400 ``unsupported_parameter``. :func:`unsupported_parameter` reads the body for a parameter the
request sent, named beside a word of refusal; such an error is a *capability error*: retrying the same
request cannot help, so it is never retried and never counts against a breaker. The backend learns it
in the server's :class:`ServerCapabilities` and sends the request without it.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Collection, Iterator
from typing import Any, ClassVar

__all__ = ["CapabilityRegistry", "ServerCapabilities", "unsupported_parameter"]

_NOT_CAPABILITY_STATUS = frozenset({401, 403, 407, 408, 409, 413, 425, 429, 502, 503, 504})
"""Auth, rate limits, conflicts and gateways: whatever their body says, they are not about a parameter."""

_REFUSAL = re.compile(
    r"unsupported|not\s+supported|(?:does\s+not|doesn't|do\s+not|cannot)\s+support|not\s+implemented"
    r"|input\s+should\s+be|(?:must|should)\s+be|unknown|unrecogni[sz]ed|invalid|not\s+(?:permitted|allowed)"
    r"|extra\s+(?:fields|inputs)",
    re.IGNORECASE,
)
"""Words a server uses to refuse a parameter (pydantic's among them: "Input should be", "Extra inputs")."""

_WINDOW = 120
"""A refusal word counts for a free-text mention only this many characters either side of it."""

_QUOTED_ONLY = frozenset({"n", "model", "messages", "stop"})
"""Names too common in prose ("unknown model error") to count unless quoted, as servers quote them."""

_ALIASES = {
    "response_format": r"response[ _]format",
    "json_schema": r"json[ _-]?schema",
    "json_object": r"json[ _-]?object",
}
"""Spellings in prose: vLLM says "The provided JSON schema contains features not supported by ..."."""

# One pydantic error as ``str(ValidationError)`` prints it (FastAPI servers put it in their 500 body).
_PYDANTIC_REPR = re.compile(
    r"'loc':\s*\((?P<loc>[^)]*)\),\s*'msg':\s*(?P<msg>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')"
)
_LOC_ITEM = re.compile(r"'([^']*)'|\"([^\"]*)\"|(\d+)")


def unsupported_parameter(status_code: int, body: str, sent: Collection[str]) -> str | None:
    """The parameter of ``sent`` that an error body says the server does not support, else ``None``.

    ``sent`` holds the request's top-level keys and the ``response_format`` type it asked for. Three
    readings, most precise first: pydantic errors (their ``loc`` names the parameter, their ``msg`` the
    refusal; the ``input`` they echo is ignored), an OpenAI-style ``param`` field, then the message's
    prose, where a sent name must be quoted or stand as a word (not a quoted key followed by ``:``, which
    is an echo of the request) within a short distance of a refusal word.
    """
    if not 400 <= status_code <= 599 or status_code in _NOT_CAPABILITY_STATUS or not sent:
        return None
    message, param, entries = _read_body(body)
    if entries:
        for loc, msg in entries:
            name = next((item for item in loc if item != "body"), None)
            if name in sent and _REFUSAL.search(msg):
                return name
        # pydantic said what it refused, and it was nothing we sent: no reading of its echoes.
        return None
    if not _REFUSAL.search(message):
        return None
    if param:
        top = re.split(r"[.\[]", param, maxsplit=1)[0]
        if top in sent:
            return top
    return _mentioned(message, sent)


def _read_body(body: str) -> tuple[str, str | None, list[tuple[list[str], str]]]:
    """The error's message, its ``param`` field and its pydantic entries (``loc`` items, ``msg``)."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        data = None
    message, param, entries = body, None, []
    error = data.get("error", data) if isinstance(data, dict) else None
    if isinstance(error, str):
        message = error
    elif isinstance(error, dict):
        found = error.get("message", error.get("detail"))
        if isinstance(found, str):
            message = found
        elif isinstance(found, list):  # FastAPI's own 422: {"detail": [{"loc": [...], "msg": ...}]}
            entries = [
                ([str(item) for item in e.get("loc", ())], str(e.get("msg", "")))
                for e in found
                if isinstance(e, dict)
            ]
        if isinstance(error.get("param"), str):
            param = error["param"]
    for match in _PYDANTIC_REPR.finditer(message):
        loc = [a or b or c for a, b, c in _LOC_ITEM.findall(match["loc"])]
        entries.append((loc, match["msg"][1:-1]))
    return message, param, entries


def _mentions(message: str, name: str) -> Iterator[int]:
    """Where ``name`` is mentioned: quoted (for the common words), else as a word; never as a quoted key
    followed by ``:``, which echoes the request rather than naming what was refused."""
    spelled = _ALIASES.get(name, re.escape(name))
    if name in _QUOTED_ONLY:
        pattern = rf"(['\"`])(?:{spelled})\1(?!\s*:)"
    else:
        pattern = rf"(?<![\w.\-])(?:{spelled})(?![\w\-])(?!['\"`]\s*:)"
    for match in re.finditer(pattern, message, re.IGNORECASE):
        yield match.start()


def _mentioned(message: str, sent: Collection[str]) -> str | None:
    """The sent name mentioned first with a refusal word near it."""
    found: list[tuple[int, str]] = []
    for name in sent:
        for at in _mentions(message, name):
            near = message[max(0, at - _WINDOW) : at + len(name) + _WINDOW]
            if _REFUSAL.search(near):
                found.append((at, name))
                break
    return min(found)[1] if found else None


class ServerCapabilities:
    """What one server (a base URL and a model) was found not to support, shared by its backends.

    ``refused`` holds *features*: a structured-output mode (``"json_schema"``, ``"json_object+schema"``,
    ``"json_object"``), ``"tools"``, or a dropped knob (``"logprobs"``, ``"seed"``, ``"n"``, ``"top_p"``,
    ``"top_k"``, ``"min_p"``). A feature is only ever added: a server that refused it once is not asked
    again for the life of the process (:meth:`forget` starts over, e.g. after the server is upgraded).
    Safe to share between threads and event loops.
    """

    def __init__(self, base_url: str, model: str) -> None:
        self.base_url = base_url
        self.model = model
        self._lock = threading.Lock()
        self._refused: set[str] = set()

    @property
    def refused(self) -> frozenset[str]:
        """The features this server refused."""
        with self._lock:
            return frozenset(self._refused)

    def refuse(self, feature: str) -> bool:
        """Remember that the server refused ``feature``; ``True`` if it was not known before."""
        with self._lock:
            new = feature not in self._refused
            self._refused.add(feature)
            return new

    def forget(self) -> None:
        """Forget everything learnt: the next requests try every feature again."""
        with self._lock:
            self._refused.clear()

    def __repr__(self) -> str:
        return f"ServerCapabilities({self.base_url!r}, {self.model!r}, refused={sorted(self.refused)})"


class CapabilityRegistry:
    """:class:`ServerCapabilities` by server, so that every backend of one server learns once.

    An :class:`~retryctl.models.OpenAIBackend` takes its server's record from the registry it is
    given, else from the process-wide :meth:`shared` one (a class-level instance behind a lock: a
    batch builds a backend per task, and each must not rediscover that the server refuses
    ``json_schema``). Pass your own registry to isolate backends, e.g. in tests.
    """

    _shared: ClassVar[CapabilityRegistry | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[tuple[str, str], ServerCapabilities] = {}

    @classmethod
    def shared(cls) -> CapabilityRegistry:
        """The registry backends use when given none."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def server(self, base_url: str, model: str) -> ServerCapabilities:
        """The record of ``model`` at ``base_url`` (a trailing slash and the host's case do not matter)."""
        key = (_normalise_url(base_url), model)
        with self._lock:
            found = self._servers.get(key)
            if found is None:
                found = self._servers[key] = ServerCapabilities(key[0], model)
            return found


def _normalise_url(url: str) -> str:
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        return url.strip().rstrip("/")
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}://{host.lower()}{slash}{path}".rstrip("/")
