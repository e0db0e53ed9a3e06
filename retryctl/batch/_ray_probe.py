"""Whether a Ray cluster answers at ``HOST:PORT`` (or ``ray://HOST:PORT``), asked before ``ray.init``.

Why: ``ray.init(address=HOST:PORT)`` with nothing listening there does not fail; it retries the GCS
connection for ever, printing a warning every 30 s (measured with Ray 2.60), and a command under
``--ray`` would hang with an empty results file. A TCP connection with a short timeout says in a
second whether anything listens; then the HTTP/2 connection preface says whether it speaks gRPC, as
a Ray GCS (and the ``ray://`` client server) does: a web server, a database or a silent port is named
as not Ray instead of hanging ``ray.init`` the same way. The GCS listens on every interface of its
machine, so the address as given is the one to probe. Under ``RAY_USE_TLS`` (gRPC over TLS) only the
TCP connection is checked: a plaintext preface is not what such a server expects.
"""

from __future__ import annotations

import os
import re
import socket

from retryctl.exceptions import ConfigError

__all__ = ["PROBE_TIMEOUT_S", "probe_cluster"]

PROBE_TIMEOUT_S = 5.0
"""Seconds to connect and to hear the server's first frame (a cluster across a slow network still
answers a TCP connection well within this)."""

_HOST_PORT = re.compile(r"(?:ray://)?\[?(?P<host>[^\[\]\s/]+?)\]?:(?P<port>\d{1,5})")
"""The host (brackets of an IPv6 one dropped) and port of an address ``check_address`` took."""

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
"""HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5)."""

_SETTINGS = 0x4
"""The type of the frame an HTTP/2 server sends first (the fourth byte of its 9-byte header)."""


def _speaks_http2(sock: socket.socket) -> bool:
    sock.sendall(_PREFACE)
    head = b""
    while len(head) < 9:
        chunk = sock.recv(9 - len(head))
        if not chunk:
            return False
        head += chunk
    return head[3] == _SETTINGS


def probe_cluster(address: str, *, field: str = "address", timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Return if a gRPC server (a Ray cluster) answers at ``address`` (``local`` and ``auto``: nothing
    to probe); else a ``ConfigError`` naming ``field`` and the address, within about ``timeout_s``."""
    match = _HOST_PORT.fullmatch(address.strip())
    if match is None:  # local, auto (or what check_address refuses)
        return
    host, port = match["host"], int(match["port"])
    where = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:  # refused, unreachable, no answer within timeout_s, a host not found
        reason = exc.strerror or ("no answer" if isinstance(exc, TimeoutError) else type(exc).__name__)
        raise ConfigError(
            field=field,
            value=address,
            problem=f"no Ray cluster answers at {where} ({reason}); start one there "
            "(ray start --head prints its address) or give another",
        ) from None
    with sock:
        if os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true"):
            return
        try:
            speaks = _speaks_http2(sock)
        except OSError:  # silent until the timeout, or reset: not a gRPC server
            speaks = False
    if not speaks:
        raise ConfigError(
            field=field,
            value=address,
            problem=f"{where} answers, but not as a Ray cluster does (no gRPC there); give the head's "
            "GCS port (ray start --head --port, 6379 by default) or, after ray://, its client server's",
        )
