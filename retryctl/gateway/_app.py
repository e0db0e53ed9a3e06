"""The ASGI app (Starlette): ``GET /v1/models``, ``POST /v1/chat/completions``, ``GET /health``.

A chat request past ``max_concurrency`` in progress is refused at once with 429 and ``Retry-After``
(backpressure: a queue inside the gateway would only hide the overload from the load balancer). One
that is not adaptive goes to the upstream (:mod:`._upstream`); an adaptive one is decided by the attempt
engine (:mod:`._adaptive`) and answered as a normal completion carrying a ``retryctl`` block (streamed,
when asked, as the decided answer in one piece: nothing is sent before the decision). Nothing is
kept between requests but the breakers (in their store) and the decision log (appended under a file
lock), so any number of replicas can serve behind one load balancer.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from retryctl.audit import DecisionLog
from retryctl.controller import Breaker
from retryctl.exceptions import BreakerOpen, ConfigError
from retryctl.gateway._adaptive import STEP_ID, Decided, decide_request
from retryctl.gateway._completion import candidate_choice, completion, sse_chunks
from retryctl.gateway._config import GatewayConfig
from retryctl.gateway._errors import ApiError, from_fault
from retryctl.gateway._faults import own_500, refused_request
from retryctl.gateway._knobs import Knobbed, output_knobs
from retryctl.gateway._request import ChatRequest, parse_body
from retryctl.gateway._rewrite import public_error
from retryctl.gateway._upstream import EmbeddedUpstream, Forwarded, HttpUpstream, Upstream
from retryctl.models import Candidate, RepeatedFault, normalise_messages
from retryctl.nodes._events import new_run_id
from retryctl.telemetry import Tracing, incoming_context
from retryctl.telemetry import names as otel_names
from retryctl.telemetry._continue import continued
from retryctl.telemetry._provider import check_tracer_provider

__all__ = ["CONFIG_ENV", "Gateway", "app_from_env", "create_app"]

CONFIG_ENV = "RETRYCTL_GATEWAY_CONFIG"
"""The environment variable through which ``retryctl serve --workers N`` hands its settings (JSON) to
each worker process (uvicorn starts workers by importing :func:`app_from_env`)."""

_JSON = "application/json"


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=_JSON)


class Gateway:
    """The state of one worker: its upstream, breakers, decision log and the requests in progress."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        upstream: Upstream | None = None,
        breaker: Breaker | None = None,
        log: DecisionLog | None = None,
        tracer_provider: Any = None,
    ) -> None:
        self.config = config
        self.tracing = Tracing(check_tracer_provider(tracer_provider))
        """Spans of adaptive requests (:mod:`retryctl.telemetry`): the global provider's unless given.
        A request's ``traceparent`` is continued (the application's global propagator reads it)."""
        self.retry = config.retry_settings()  # one for the proxy and every adaptive request
        self.breaker = breaker if breaker is not None else config.breaker()
        self.upstream = upstream if upstream is not None else self._upstream()
        # What the gateway opened it closes; a log or breaker handed in stays its owner's.
        self._owns_log = log is None
        self._owns_breaker = breaker is None
        self.log = log if log is not None else (DecisionLog(config.log) if config.log is not None else None)
        self.calibration = config.calibration_choice()
        """What adaptive requests map their confidence through (loaded once per worker)."""
        self.in_flight = 0

    def _upstream(self) -> Upstream:
        cfg = self.config
        if cfg.embedded:
            from retryctl.models import EmbeddedBackend

            return EmbeddedUpstream(
                EmbeddedBackend(n_ctx=2048, n_threads=cfg.n_threads), name=cfg.served_name
            )
        assert cfg.upstream is not None and cfg.upstream_model is not None  # GatewayConfig checked both
        return HttpUpstream(
            base_url=cfg.upstream,
            model=cfg.upstream_model,
            name=cfg.served_name,
            timeout_s=cfg.timeout_s,
            retry=self.retry,
            breaker=self.breaker,
            max_connections=cfg.max_concurrency,
        )

    # -- routes -----------------------------------------------------------------------------------

    async def models(self, request: Request) -> Response:
        entry = {"id": self.upstream.name, "object": "model", "created": 0, "owned_by": "retryctl"}
        return _json({"object": "list", "data": [entry]})

    async def health(self, request: Request) -> Response:
        return _json(
            {"status": "ok", "in_flight": self.in_flight, "max_concurrency": self.config.max_concurrency}
        )

    async def chat(self, request: Request) -> Response:
        if self.in_flight >= self.config.max_concurrency:
            return ApiError(
                429,
                f"the gateway has {self.in_flight} requests in progress (max_concurrency "
                f"{self.config.max_concurrency}); try again shortly",
                type="rate_limit_error",
                code="gateway_busy",
                retry_after_s=1.0,
            ).response()
        self.in_flight += 1
        streaming = False
        try:
            # The embedded model reads text only; what it cannot read is refused with the rest.
            text_model = isinstance(self.upstream, EmbeddedUpstream)
            body, chat = parse_body(await request.body(), text_model=text_model)
            if chat.model != self.upstream.name:
                raise ApiError(
                    404,
                    f"the model {chat.model!r} does not exist; this gateway serves {self.upstream.name!r}",
                    param="model",
                    code="model_not_found",
                )
            if chat.adaptive:
                return await self._adaptive(chat, request)
            with continued(request.headers):  # the upstream request carries the caller's traceparent
                forwarded = await self.upstream.forward(body, chat)
            if forwarded.chunks is None:
                return Response(
                    forwarded.content, status_code=forwarded.status, media_type=forwarded.media_type
                )
            streaming = True  # the request is in progress until its last chunk is sent
            return _Passed(forwarded, self._release)
        except ApiError as exc:
            return self._public(exc).response()
        except ConfigError as exc:
            # A value of the request a backend refused past the edge's checks: still the caller's, by name.
            return ApiError(400, str(exc), param=exc.field, code="invalid_value").response()
        finally:
            if not streaming:
                self.in_flight -= 1

    def _public(self, error: ApiError) -> ApiError:
        """``error`` naming the model as clients know it, not by the upstream's own name (a path)."""
        if isinstance(self.upstream, HttpUpstream):
            return public_error(error, internal=self.upstream.model, public=self.upstream.name)
        return error

    def _release(self) -> None:
        self.in_flight -= 1

    async def _adaptive(self, chat: ChatRequest, request: Request) -> Response:
        if not self.tracing.active:
            return await self._decided(chat)
        # The caller's trace goes on here: the request's traceparent, or the span of a server
        # instrumentation that already continued it.
        attributes = {otel_names.OPERATION_NAME: "chat", otel_names.REQUEST_MODEL: self.upstream.name}
        with self.tracing.step(
            STEP_ID, kind="model", attributes=attributes, context=incoming_context(request.headers)
        ):
            return await self._decided(chat)

    async def _decided(self, chat: ChatRequest) -> Response:
        if isinstance(self.upstream, HttpUpstream):
            await self.upstream.while_probing()  # a half-open breaker's probe decides for this one too
        run_id = new_run_id()
        knobs = output_knobs(chat)
        # A 500 the upstream repeats word for word is judged with the proxied requests' (._faults).
        faults = self.upstream if isinstance(self.upstream, HttpUpstream) else None
        params = knobs.apply(chat.sampling_params(default_max_tokens=512))
        options = chat.options
        if params.wants_json and options.answer == "auto":
            options = options.model_copy(update={"answer": "json"})  # votes on the JSON value
        decided = await decide_request(
            # Every sample under the request's response_format and stop, not only the schedule's knobs.
            backend=Knobbed(self.upstream.backend, params),
            messages=normalise_messages(chat.messages),
            params=params,
            options=options,
            run_id=run_id,
            retry=self.retry,
            clock=time.monotonic,
            breaker=self.breaker,
            log=self.log,
            calibration=self.calibration,
            faults=faults,
            tracing=self.tracing,
            token_log=self.config.token_log,
        )
        if decided.chosen is None:
            raise self._nothing_drawn(decided)
        # The chosen sample as drawn: its finish reason (``length`` when cut), its logprobs.
        drawn = decided.chosen_candidate or Candidate(text=decided.chosen["text"], model=self.upstream.name)
        choice = candidate_choice(0, drawn, top_logprobs=knobs.top_logprobs)
        block = decided.block(run_id)
        done = completion(
            model=self.upstream.name,
            choices=[choice],
            # Every sample of every attempt: what the request cost, as the log's budget_used says.
            input_tokens=decided.input_tokens,
            output_tokens=decided.output_tokens,
            id=f"chatcmpl-{run_id.replace('-', '')[:24]}",
            extra={"retryctl": block},
        )
        verdict = decided.verdict
        # The block again as headers, for clients that keep only the standard fields of the body
        # (LangChain's ChatOpenAI shows headers with include_response_headers=True).
        headers = {
            "x-retryctl-verdict": verdict.action.value,
            "x-retryctl-confidence": "" if verdict.confidence is None else f"{verdict.confidence:.6f}",
            "x-retryctl-samples-used": str(decided.samples_used),
            "x-retryctl-run-id": run_id,
            "x-retryctl-calibration": decided.calibration or "",
        }
        if chat.stream:
            asked = chat.stream_options  # a declared field: never in model_extra
            include_usage = asked is not None and asked.get("include_usage") is True
            events = sse_chunks(done, include_usage=include_usage, extra={"retryctl": block})
            return StreamingResponse(iter(events), media_type="text/event-stream", headers=headers)
        return Response(orjson.dumps(done), media_type=_JSON, headers=headers)

    def _nothing_drawn(self, decided: Decided) -> ApiError:
        """Why an adaptive request has no answer to give: the upstream's fault, its open breaker, or a
        budget that allowed no sample."""
        error, reason = decided.error, decided.verdict.reason
        if isinstance(error, BreakerOpen):
            wait = max(0.0, error.retry_at - self.breaker.clock())
            return ApiError(
                503,
                f"upstream {self.upstream.name}: {reason}",
                type="upstream_unavailable",
                code="breaker_open",
                retry_after_s=wait,
            )
        suspect = isinstance(self.upstream, HttpUpstream) and self.upstream.suspect
        if own_500(error) and not (suspect and isinstance(error, RepeatedFault)):
            return refused_request(error, upstream=self.upstream.name)  # as the proxy answers it
        if error is not None:
            return from_fault(error, upstream=self.upstream.name)
        return ApiError(
            400, f"no sample could be drawn: {reason}", param="retryctl.budget", code="budget_exhausted"
        )

    # -- life -------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the upstream's clients, and the log and breaker store it opened."""
        await self.upstream.aclose()
        if self.log is not None and self._owns_log:
            self.log.close()
        close = getattr(self.breaker.store, "close", None)
        if close is not None and self._owns_breaker:
            close()


class _Passed(StreamingResponse):
    """An upstream's stream passed on, chunk by chunk. Its request stays in progress, and the upstream
    connection open, until the response ends however it ends: sent whole, cut by the upstream, or
    abandoned by a caller that went away (even before the first chunk, when a generator's own
    ``finally`` would never run)."""

    def __init__(self, forwarded: Forwarded, release: Callable[[], None]) -> None:
        assert forwarded.chunks is not None
        super().__init__(forwarded.chunks, status_code=forwarded.status, media_type=forwarded.media_type)
        self._forwarded = forwarded
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()
            if self._forwarded.close is not None:
                await self._forwarded.close()


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code = {404: "not_found", 405: "method_not_allowed"}.get(status, "error")
    message = f"{request.method} {request.url.path}: {getattr(exc, 'detail', 'error')}"
    return ApiError(status, message, code=code).response()


async def _internal_error(request: Request, exc: Exception) -> Response:
    # A bug of the gateway's own: the caller still gets OpenAI's shape (and the SDK its typed error),
    # with the exception named; uvicorn logs the traceback.
    message = f"the gateway failed on {request.url.path}: {type(exc).__name__}: {exc}"
    return ApiError(
        500, " ".join(message.split())[:500], type="server_error", code="internal_error"
    ).response()


def create_app(config: GatewayConfig, *, gateway: Gateway | None = None) -> Starlette:
    """The gateway's ASGI app for ``config`` (or around an existing ``gateway``, e.g. one built on a
    scripted backend in a test)."""
    served = gateway if gateway is not None else Gateway(config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await served.aclose()

    app = Starlette(
        routes=[
            Route("/v1/models", served.models, methods=["GET"]),
            Route("/v1/chat/completions", served.chat, methods=["POST"]),
            Route("/health", served.health, methods=["GET"]),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    app.state.gateway = served
    return app


def app_from_env() -> Starlette:
    """The app of the settings in :data:`CONFIG_ENV` (uvicorn's factory in each worker process)."""
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise RuntimeError(f"{CONFIG_ENV} is not set: start the gateway with `retryctl serve`")
    return create_app(GatewayConfig.model_validate_json(raw))
