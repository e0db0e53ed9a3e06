"""Where a request that is not adaptive goes: an OpenAI-compatible server (proxied) or the embedded model.

:class:`HttpUpstream` forwards the caller's body as sent (``model`` set to the upstream's name, the
gateway's own ``adaptive`` and ``retryctl`` fields taken out, all-text content parts joined:
:mod:`._rewrite`; the answer's ``model`` is the client's name again) with aiohttp, under the controller's
rules: the upstream's breaker admits the request (while its half-open probe is in flight, after waiting
for the probe's outcome: :mod:`._probe`); a transient fault (a dropped connection, 408/409/425/429, a
5xx) is tried again with tenacity's backoff as the backends do (:func:`~retryctl.models._retry.
call_with_retries`, ``Retry-After`` honoured), and is counted against the breaker when the retries do not
get past it. A failure that is the request's own (:mod:`._faults`) is neither retried nor counted: a
refusal (another 4xx), passed back as the upstream wrote it (in OpenAI's shape when it was not); a 500
that the same body meets again word for word, answered 502 ``upstream_refused_request``. A streamed
answer is passed through chunk by chunk once the upstream has answered 200: a fault before that is
retried like any other, one after it ends the stream (the caller has part of an answer by then).

:class:`EmbeddedUpstream` answers from the in-process model: ``n`` candidates sampled with the request's
knobs (``logprobs`` and ``response_format`` honoured, :mod:`._knobs`), a stream sent as it is decoded
(:mod:`._stream`).
"""

from __future__ import annotations

import dataclasses
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import orjson

from retryctl.controller import Breaker, classify
from retryctl.controller._breaker import Admission, counts_against
from retryctl.exceptions import ConfigError
from retryctl.gateway._completion import candidate_choice, completion, sse_chunks
from retryctl.gateway._errors import ApiError, from_fault
from retryctl.gateway._faults import (
    CHECK_BODY,
    OWN_STATUS,
    RepeatedFault,
    RequestFaults,
    ServerFault,
    detail_of,
    message_of,
    refusal,
    refused_request,
)
from retryctl.gateway._knobs import output_knobs
from retryctl.gateway._probe import ProbeWait
from retryctl.gateway._request import ChatRequest
from retryctl.gateway._rewrite import joined_text_parts, renamed_body, renamed_events
from retryctl.gateway._stream import TokenStream, streams_text
from retryctl.models import (
    BackendError,
    BackendTimeout,
    ModelBackend,
    OpenAIBackend,
    RetrySettings,
    ToolSpec,
    TransientBackendError,
)
from retryctl.models._openai_wire import parse_retry_after, status_error
from retryctl.models._propagation import trace_headers
from retryctl.models._retry import call_with_retries

__all__ = ["EmbeddedUpstream", "Forwarded", "HttpUpstream", "Upstream"]

_GATEWAY_FIELDS = ("adaptive", "retryctl")
"""Body fields the gateway reads and an upstream must not see (a strict server refuses unknown ones)."""
_JSON = "application/json"
_JSON_HEADERS = {"content-type": _JSON}
_FREE = Admission()


@dataclass
class Forwarded:
    """An upstream's answer to pass to the caller: a whole body, or chunks to stream."""

    status: int
    media_type: str
    content: bytes = b""
    chunks: AsyncIterator[bytes] | None = None
    close: Callable[[], Awaitable[None]] | None = None
    """Called once the chunks are sent (or the caller went away): releases the upstream connection."""
    headers: dict[str, str] = field(default_factory=dict)


class Upstream(Protocol):
    """What the gateway serves: a model by one name, a backend to sample it adaptively, a way to forward."""

    @property
    def name(self) -> str:
        """The model name clients send (``GET /v1/models`` lists it)."""
        ...

    @property
    def backend(self) -> ModelBackend:
        """The backend adaptive requests sample."""
        ...

    async def forward(self, body: dict[str, Any], request: ChatRequest) -> Forwarded:
        """Answer a request that is not adaptive; raise :class:`ApiError` for the caller."""
        ...

    async def aclose(self) -> None:
        """Release clients and connections."""
        ...


class HttpUpstream:
    """An OpenAI-compatible server at ``base_url`` (``.../v1``) serving ``model``, which clients call
    ``name`` (by default the same)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        name: str | None = None,
        timeout_s: float,
        retry: RetrySettings,
        breaker: Breaker | None,
        max_connections: int,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._name = name or model
        self.retry = retry
        self.breaker = breaker
        self._url = self.base_url + "/chat/completions"
        self._proxy = upstream_proxy(self._url)  # as a client would have honoured it
        # aiohttp, not httpx, for the requests passed on: measured here against the latency server,
        # a request through httpx's transport cost 447 us of CPU and one through aiohttp 124 us
        # (httpcore's pure-Python HTTP/1.1 parser and its anyio layers, against aiohttp's C parser on
        # the loop itself), and the proxy is the gateway's whole cost per request. A timeout bounds
        # getting a connection and each read, as httpx's did, not a whole stream.
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=timeout_s, sock_connect=timeout_s, sock_read=timeout_s
        )
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None  # made in the serving loop, on first use
        self._backend = OpenAIBackend(model=model, base_url=self.base_url, timeout_s=timeout_s, retry=retry)
        self._faults = RequestFaults(check_after=3)
        self._checking = False  # one check of the upstream at a time
        self._probes = None if breaker is None else ProbeWait(breaker, model, wait_s=timeout_s)

    @property
    def name(self) -> str:
        return self._name

    @property
    def backend(self) -> ModelBackend:
        return self._backend

    async def forward(self, body: dict[str, Any], request: ChatRequest) -> Forwarded:
        payload = {k: v for k, v in body.items() if k not in _GATEWAY_FIELDS}
        payload["model"] = self.model
        joined = joined_text_parts(payload.get("messages"))
        if joined is not None:  # all-text parts as one string: the same meaning, read by more servers
            payload["messages"] = joined
        content = orjson.dumps(payload)
        admission = _FREE if self._probes is None else await self._probes.admit()
        if admission.refused is not None:
            raise ApiError(
                503,
                f"upstream {self.model}: {classify(admission.refused).reason}",
                type="upstream_unavailable",
                code="breaker_open",
                retry_after_s=getattr(admission.refused, "wait_s", None),  # a store fault has none
            )
        failed: bool | None = None  # None: the outcome says nothing of the upstream's health
        try:
            try:
                forwarded = await self._tried(content, stream=request.stream)
            except RepeatedFault as exc:
                failed = await self.judged(content, exc)
                if failed:  # the upstream fails everything alike: its fault, counted, and said so
                    raise from_fault(exc, upstream=self.model) from None
                raise refused_request(exc, upstream=self.model) from None
            except BackendError as exc:
                failed = counts_against(classify(exc), exc)
                raise from_fault(exc, upstream=self.model) from None
            if forwarded.status < 400:
                failed = False
                self._faults.succeeded()
            return self._renamed(forwarded)  # a refusal (4xx) is the request's own: neither outcome
        finally:
            self._settle(admission, failed)

    def _renamed(self, forwarded: Forwarded) -> Forwarded:
        """``forwarded`` saying the name the client used where the upstream said its own."""
        if forwarded.chunks is not None:
            forwarded.chunks = renamed_events(forwarded.chunks, self._name)
        elif forwarded.status < 400:
            forwarded.content = renamed_body(forwarded.content, self._name)
        elif self.model != self._name:
            forwarded.content = forwarded.content.replace(self.model.encode(), self._name.encode())
        return forwarded

    async def while_probing(self) -> None:
        """Wait (bounded) while the breaker's half-open probe is in flight (:mod:`._probe`)."""
        if self._probes is not None:
            await self._probes.while_probing()

    @property
    def suspect(self) -> bool:
        """Whether the upstream was found to fail every request alike (:class:`RequestFaults`)."""
        return self._faults.suspect

    def succeeded(self) -> None:
        """A request succeeded (an adaptive one's draw): the upstream is healthy."""
        self._faults.succeeded()

    async def judged(self, content: bytes, fault: RepeatedFault) -> bool | None:
        """Whether a 500 the same body (``content``: a proxied body, an adaptive request's messages)
        met twice counts against the breaker: not as the request's own (``None``), unless the upstream
        answers a minimal request of the gateway's own no better."""
        if self.breaker is None:
            return None
        due = self._faults.remember(content, fault)
        if self._faults.suspect:
            return True
        if not due or self._checking:
            return None
        self._checking = True
        try:
            check = orjson.dumps({**CHECK_BODY, "model": self.model})
            answered = await self._once(check, stream=False)
            healthy = answered.status < 500
        except BackendError:
            healthy = False
        finally:
            self._checking = False
        if healthy:
            self._faults.succeeded()
            return None
        self._faults.suspect = True
        return True

    def _settle(self, admission: Admission, failed: bool | None) -> None:
        """Report the outcome to the breaker; a probe whose outcome says nothing gives its slot back.
        Either way, requests waiting on a probe ask again."""
        if self.breaker is None or self._probes is None:
            return
        if failed is not None:
            self.breaker.report(self.model, failed=failed)
        elif admission.probe:
            self.breaker.release(self.model)
        self._probes.settled()

    async def _tried(self, content: bytes, *, stream: bool) -> Forwarded:
        """The first try on its own; after a fault worth retrying, tenacity's retries, handed that try's
        fault as their first (so the backoffs, the retry log and ``attempts`` are theirs). Setting up
        tenacity for every request, when nearly all need no retry, cost about 9 % of the gateway's
        throughput at saturation."""
        try:
            return await self._once(content, stream=stream)
        except BackendError as exc:
            exc.attempts = 1
            if isinstance(exc, ServerFault) and self._faults.known(content, exc):
                raise RepeatedFault(exc) from None  # this body met this 500 before: no retry to tell
            if not self.retry.should_retry(exc) or self.retry.attempts == 1:
                raise
            first: list[BackendError] = [exc]

        async def again() -> Forwarded:
            # The retries compare each 500 with the try's before (the first's included): the same
            # body meeting the same 500 word for word ends them as the request's own (RepeatedFault).
            if first:
                raise first.pop()
            return await self._once(content, stream=stream)

        return await call_with_retries(again, self.retry, label=self.model)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                limit_per_host=0,
                # Below uvicorn's 5 s (vLLM's, SGLang's servers): a connection is not reused just as
                # the server closes it.
                keepalive_timeout=4.0,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                # No cookies kept between callers; no compression asked for (an answer compressed
                # anyway is decoded, as the caller was not asked to decode it).
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("Accept-Encoding", "User-Agent"),
            )
        return self._session

    async def _once(self, content: bytes, *, stream: bool) -> Forwarded:
        streaming = False  # a stream passed on holds its connection until the stream is closed
        response: aiohttp.ClientResponse | None = None
        try:
            try:
                traced = trace_headers()  # None unless a span or an incoming trace is current
                headers = _JSON_HEADERS if traced is None else {**_JSON_HEADERS, **traced}
                response = await self._client().post(
                    self._url, data=content, headers=headers, proxy=self._proxy
                )
                if not stream or response.status >= 400:
                    raw = await response.read()  # and the connection goes back to the pool
            except TimeoutError as exc:
                raise BackendTimeout(f"{type(exc).__name__}: no answer in time", backend=self.model) from exc
            except aiohttp.ClientError as exc:
                raise TransientBackendError(
                    f"connection failed: {type(exc).__name__}: {exc}", backend=self.model
                ) from exc
            media_type = response.headers.get("content-type", "application/json")
            if response.status >= 400:
                message = f"HTTP {response.status}: {message_of(raw)}"
                wait = parse_retry_after(response.headers)
                if response.status == OWN_STATUS:
                    raise ServerFault(message, backend=self.model, detail=detail_of(raw), retry_after_s=wait)
                error = status_error(response.status, message, backend=self.model, retry_after_s=wait)
                if error.retryable:
                    raise error
                refused = refusal(response.status, raw, upstream=self._name)  # the caller's to fix
                return Forwarded(response.status, _JSON, content=refused)
            if not stream:
                return Forwarded(response.status, media_type, content=raw)
            held = response

            async def close() -> None:
                held.release()  # read to its end, the connection goes back to the pool; else it is closed

            streaming = True
            # A fault after the first chunk propagates: the caller's connection is cut, not ended as if
            # the answer were whole.
            return Forwarded(response.status, media_type, chunks=response.content.iter_any(), close=close)
        finally:
            if response is not None and not streaming:
                response.release()

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        await self._backend.aclose()


def upstream_proxy(url: str) -> str | None:
    """The proxy for requests to ``url`` (:func:`_environment_proxy`); a proxy aiohttp cannot use (SOCKS)
    is a :class:`~retryctl.exceptions.ConfigError` naming it."""
    proxy = _environment_proxy(url)
    if proxy is not None and not proxy.startswith(("http://", "https://")):
        raise ConfigError(
            field="proxy",
            value=proxy,
            problem="the environment names a proxy the gateway cannot use for its upstream: only "
            "http:// and https:// proxies (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY); NO_PROXY can exclude "
            "the upstream's host",
        )
    return proxy


def _environment_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``, ``HTTP_PROXY`` or ``ALL_PROXY``, unless
    ``NO_PROXY`` excludes its host), as httpx's clients read it."""
    parts = urllib.parse.urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    found = urllib.request.getproxies()
    proxy = found.get(parts.scheme) or found.get("all")
    if not proxy:
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


class EmbeddedUpstream:
    """The embedded model (or any in-process backend) answering requests itself."""

    def __init__(self, backend: ModelBackend, *, name: str, default_max_tokens: int = 512) -> None:
        self._backend = backend
        self._name = name
        self.default_max_tokens = default_max_tokens

    @property
    def name(self) -> str:
        return self._name

    @property
    def backend(self) -> ModelBackend:
        return self._backend

    async def forward(self, body: dict[str, Any], request: ChatRequest) -> Forwarded:
        knobs = output_knobs(request)
        params = knobs.apply(request.sampling_params(default_max_tokens=self.default_max_tokens))
        tools = _tools(body.get("tools"))
        if tools:
            params = dataclasses.replace(params, tools=tools)
        n = request.n or 1
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        if request.stream and streams_text(self._backend):
            stream = TokenStream(
                self._backend,
                request.messages,
                params,
                k=n,
                model=self._name,
                include_usage=include_usage,
                top_logprobs=knobs.top_logprobs,
            )
            await stream.start()
            return Forwarded(200, "text/event-stream", chunks=stream.chunks(), close=stream.close)
        try:
            candidates = await self._backend.sample(request.messages, params, k=n)
        except BackendError as exc:
            raise from_fault(exc, upstream=self._name) from None
        done = completion(
            model=self._name,
            choices=[
                candidate_choice(i, c, top_logprobs=knobs.top_logprobs) for i, c in enumerate(candidates)
            ],
            # The prompt is read once for all n choices, as OpenAI counts it.
            input_tokens=max((c.usage.input_tokens for c in candidates), default=0),
            output_tokens=sum(c.usage.output_tokens for c in candidates),
        )
        if request.stream:  # a backend that decodes whole (a scripted one): one chunk a choice
            return Forwarded(
                200, "text/event-stream", chunks=_aiter(sse_chunks(done, include_usage=include_usage))
            )
        return Forwarded(200, "application/json", content=orjson.dumps(done))

    async def aclose(self) -> None:
        close = getattr(self._backend, "aclose", None)
        if close is not None:
            await close()


def _tools(raw: Any) -> tuple[ToolSpec, ...]:
    if raw in (None, []):
        return ()
    if not isinstance(raw, list):
        raise ApiError(400, "invalid 'tools': must be a list of tools", param="tools", code="invalid_value")
    try:
        return tuple(ToolSpec.coerce(t) for t in raw)
    except ValueError as exc:
        raise ApiError(400, f"invalid 'tools': {exc}", param="tools", code="invalid_value") from None


async def _aiter(items: Iterable[bytes]) -> AsyncIterator[bytes]:
    for item in items:
        yield item
