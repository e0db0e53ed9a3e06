"""``probe_cluster``: an address where no Ray cluster answers is named at once, not handed to
``ray.init`` (which retries it for ever). Servers on 127.0.0.1 only; no cluster needed."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from retryctl.batch._ray_probe import probe_cluster
from retryctl.exceptions import ConfigError
from tests._ray_cluster import free_port


def _serve(reply: bytes) -> Iterator[int]:
    """A server on 127.0.0.1 answering every connection with ``reply`` (after reading what comes)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = int(server.getsockname()[1])

    def loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
                conn.sendall(reply)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield port
    server.close()


@pytest.fixture
def http1_port() -> Iterator[int]:
    yield from _serve(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


@pytest.fixture
def http2_port() -> Iterator[int]:
    yield from _serve(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # an empty SETTINGS frame, as gRPC's first


class TestProbeCluster:
    def test_a_port_nobody_listens_on_is_named(self) -> None:
        port = free_port()
        with pytest.raises(ConfigError) as caught:
            probe_cluster(f"127.0.0.1:{port}", field="--ray")
        assert caught.value.field == "--ray"
        assert f"no Ray cluster answers at 127.0.0.1:{port}" in caught.value.problem

    def test_a_ray_client_address_is_probed_on_its_port(self) -> None:
        port = free_port()
        with pytest.raises(ConfigError, match=f"no Ray cluster answers at 127.0.0.1:{port}"):
            probe_cluster(f"ray://127.0.0.1:{port}")

    def test_a_server_that_is_not_grpc_is_named_as_not_ray(self, http1_port: int) -> None:
        with pytest.raises(ConfigError, match="answers, but not as a Ray cluster does"):
            probe_cluster(f"127.0.0.1:{http1_port}")

    def test_a_server_speaking_http2_passes(self, http2_port: int) -> None:
        probe_cluster(f"127.0.0.1:{http2_port}")
        probe_cluster(f"ray://127.0.0.1:{http2_port}")

    @pytest.mark.parametrize("address", ["local", "auto"])
    def test_local_and_auto_are_not_probed(self, address: str) -> None:
        probe_cluster(address)
