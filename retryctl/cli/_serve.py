"""``retryctl serve``: the OpenAI-compatible gateway (:mod:`retryctl.gateway`) on uvicorn.

On SIGTERM or Ctrl-C the gateway stops taking connections, finishes the requests in progress (for up to
``--graceful-timeout`` seconds), then says so in one ``stopped:`` line on stderr. After Ctrl-C (SIGINT)
it exits 130, as the other commands do; after SIGTERM it ends by the signal, as a supervisor expects of
a process it stopped (a shell shows 143, ``subprocess`` -15).
Exit code 2: the ``gateway`` extra not installed, bad settings (one ``problem:`` line naming the
option), an address that cannot be bound (a busy ``--port``) or an embedded model that cannot run on this
CPU. "serving ..." is printed once the socket is bound and listening, never before.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from retryctl.cli._interrupt import INTERRUPTED_EXIT
from retryctl.cli._token_log_option import TokenLogMaxOption, TokenLogOption, token_log_of
from retryctl.controller._token_log import TokenLog

__all__ = ["serve"]

_USAGE_EXIT = 2
_BACKLOG = 2048  # uvicorn's own
_OPTION_OF = {
    "upstream": "--upstream",
    "upstream_model": "--upstream-model",
    "model_name": "--model-name",
    "max_concurrency": "--max-concurrency",
    "timeout_s": "--timeout",
    "retries": "--retries",
    "retry_wait_s": "--retry-wait",
    "breakers": "--breakers",
    "breaker_failures": "--breaker-failures",
    "breaker_cooldown_s": "--breaker-cooldown",
    "log": "--log",
    "calibration": "--calibration",
    "token_log": "--token-log",
}


def serve(
    *,
    embedded: Annotated[bool, typer.Option("--embedded", help="Serve the embedded model (offline).")] = False,
    upstream: Annotated[
        str | None,
        typer.Option("--upstream", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1."),
    ] = None,
    upstream_model: Annotated[
        str | None, typer.Option("--upstream-model", help="The model's name on the upstream.")
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option("--model-name", help="Name clients send (default: the upstream's, or smollm2)."),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 8080,
    log: Annotated[
        Path | None, typer.Option("--log", help="Decision log (JSONL) for adaptive requests.")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Worker processes.")] = 1,
    max_concurrency: Annotated[
        int, typer.Option("--max-concurrency", min=1, help="Requests in progress per worker; past it, 429.")
    ] = 64,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for one upstream request.")
    ] = 60.0,
    retries: Annotated[int, typer.Option("--retries", help="Transport retries per upstream request.")] = 3,
    retry_wait: Annotated[
        float, typer.Option("--retry-wait", help="Seconds before the first retry (doubling, jittered).")
    ] = 0.5,
    breakers: Annotated[
        str, typer.Option("--breakers", help="Breaker state: memory, sqlite:PATH or redis://host:port/db.")
    ] = "memory",
    breaker_failures: Annotated[
        int, typer.Option("--breaker-failures", help="Consecutive upstream failures that open its breaker.")
    ] = 5,
    breaker_cooldown: Annotated[
        float, typer.Option("--breaker-cooldown", help="Seconds an open breaker refuses before a probe.")
    ] = 30.0,
    graceful_timeout: Annotated[
        int, typer.Option("--graceful-timeout", min=0, help="Seconds to finish requests on shutdown.")
    ] = 30,
    calibration: Annotated[
        str | None,
        typer.Option(
            "--calibration",
            help="Adaptive requests' calibration: 'shipped' (the embedded model's; its default), 'none' "
            "(raw fused confidence) or a file (retryctl calibrate). On --upstream with none given: "
            "uncalibrated.",
        ),
    ] = None,
    keep_alive: Annotated[
        int,
        typer.Option(
            "--keep-alive",
            min=1,
            help="Seconds an idle client connection is kept open (above your load balancer's idle timeout).",
        ),
    ] = 75,
    token_log: TokenLogOption = None,
    token_log_max: TokenLogMaxOption = None,
) -> None:
    """Serve an OpenAI-compatible API that samples adaptively ("adaptive": true) and proxies the rest."""
    from retryctl.cli._model_check import require_extra

    require_extra("gateway", "retryctl serve")
    from retryctl.gateway import GatewayConfig
    from retryctl.gateway._app import CONFIG_ENV

    if calibration is not None:
        from retryctl.evals._choice import choose_calibration
        from retryctl.exceptions import ConfigError

        try:  # first, so that a bad value reads as it does in `batch` and `eval`
            choose_calibration(calibration, embedded=embedded)
        except ConfigError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(_USAGE_EXIT) from None
    try:
        config = GatewayConfig(
            embedded=embedded,
            upstream=upstream,
            upstream_model=upstream_model,
            model_name=model_name,
            log=log,
            max_concurrency=max_concurrency,
            timeout_s=timeout,
            retries=retries,
            retry_wait_s=retry_wait,
            breakers=breakers,
            breaker_failures=breaker_failures,
            breaker_cooldown_s=breaker_cooldown,
            calibration=calibration,
            token_log=token_log_of(token_log, token_log_max, TokenLog()) or TokenLog(),
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        where = f"{_OPTION_OF.get(field, '--' + field.replace('_', '-'))}: " if field else ""
        problem = str(first["msg"]).removeprefix("Value error, ")
        typer.echo(f"problem: {where}{problem}", err=True)
        raise typer.Exit(_USAGE_EXIT) from None
    if config.upstream is not None:
        from retryctl.exceptions import ConfigError
        from retryctl.gateway._upstream import upstream_proxy

        try:
            upstream_proxy(config.upstream)
        except ConfigError as exc:
            typer.echo(f"problem: {exc}", err=True)
            raise typer.Exit(_USAGE_EXIT) from None
    if config.embedded:
        from retryctl.cli._model_check import require_embedded_build

        require_embedded_build("retryctl serve --embedded")

    # Every worker (one or many) builds its app from the same JSON: uvicorn starts workers by import.
    os.environ[CONFIG_ENV] = config.model_dump_json()
    # Bound and listening before "serving" is said: a busy port is this command's error, not a
    # traceback after the announcement; connections made from then on wait in the backlog.
    sock = _listening(host, port)
    bound = sock.getsockname()[1]
    source = config.upstream if config.upstream else "the embedded model"
    where = f"http://{host}:{bound}/v1"
    typer.echo(f"retryctl gateway: serving {config.served_name!r} from {source} on {where}", err=True)
    typer.echo(f"retryctl gateway: adaptive requests' {config.calibration_choice().describe()}", err=True)
    with sock:
        stopped_by = _run(sock, workers=workers, graceful_timeout=graceful_timeout, keep_alive=keep_alive)
    if stopped_by is None:
        return
    name = "Ctrl-C" if stopped_by == signal.SIGINT else signal.Signals(stopped_by).name
    kept = f"; decisions kept in {log}" if log is not None else ""
    typer.echo(f"stopped: {name}; new connections refused, requests in progress finished{kept}", err=True)
    if stopped_by == signal.SIGTERM:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
    raise typer.Exit(INTERRUPTED_EXIT)


def _listening(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` and listening, as uvicorn would bind it; an address that
    cannot be bound is a ``problem:`` line naming the option, exit 2."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            problem = f"--port: {port} is already in use on {host}; stop what listens there or choose another"
        elif exc.errno == errno.EACCES:
            problem = f"--port: {port} on {host} needs privileges this process lacks; choose one above 1023"
        else:
            problem = f"--host: cannot listen on {host}:{port} ({exc.strerror or exc})"
        typer.echo(f"problem: {problem}", err=True)
        raise typer.Exit(_USAGE_EXIT) from None
    sock.set_inheritable(True)  # worker processes serve on it too
    return sock


_STOPS = (signal.SIGINT, signal.SIGTERM)


def _run(sock: socket.socket, *, workers: int, graceful_timeout: int, keep_alive: int) -> int | None:
    """uvicorn serving the gateway on ``sock``: the signal that stopped it (SIGINT or SIGTERM), ``None``
    when it ended otherwise."""
    import uvicorn

    from retryctl.gateway._http import CoalescingHttpToolsProtocol

    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again under the handlers it
    # found: these record it, where Python's own would end the process (143, nothing said) or raise a
    # KeyboardInterrupt that uvicorn swallows (exit 0, nothing said).
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda got, _frame: received.append(got)) for sig in _STOPS}
    try:
        uvicorn.run(
            "retryctl.gateway:app_from_env",
            factory=True,
            fd=sock.fileno(),
            workers=workers,
            timeout_graceful_shutdown=graceful_timeout,
            # uvicorn's own 5 s is below every load balancer's idle timeout (60 s is common): a balancer
            # reusing a connection the gateway has just closed turns a good request into its own 502.
            timeout_keep_alive=keep_alive,
            log_level="warning",
            access_log=False,
            http=CoalescingHttpToolsProtocol,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return received[0] if received else None
