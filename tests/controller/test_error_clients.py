"""classify on the real exceptions of real HTTP clients and sockets, raised against a local server that
hangs, resets the connection or answers 429 (with Retry-After), 503, 400, 401 and 404, and a closed port.

Every client, every fault: the class, the status and the wait. Before the libraries' tables, a
``requests.ReadTimeout`` or a ``urllib.error.URLError`` was "terminal: unrecognised exception type".
"""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request

import aiohttp
import httpx
import openai
import pytest
import requests
import urllib3

from retryctl.controller import classify
from tests.controller._clients import FAULTS, NETWORK, TIMEOUT_S, Fault, araised, base_url, raised
from tests.models._fault_server import FaultServer

ids = [f.name for f in FAULTS]


def check(exc: BaseException, fault: Fault) -> None:
    got = classify(exc)
    assert got.error_class.value == fault.error_class, (fault.name, type(exc), got)
    assert got.status_code == fault.status, got
    assert got.retry_after_s == fault.retry_after_s, got
    assert "unrecognised" not in got.reason, got


def _requests(url: str) -> None:
    requests.get(f"{url}/v1/thing", timeout=TIMEOUT_S).raise_for_status()


def _urllib(url: str) -> None:
    with urllib.request.urlopen(f"{url}/v1/thing", timeout=TIMEOUT_S) as response:
        response.read()


def _httpx(url: str) -> None:
    httpx.get(f"{url}/v1/thing", timeout=TIMEOUT_S).raise_for_status()


def _openai(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0, timeout=TIMEOUT_S)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


async def _aiohttp(url: str) -> None:
    timeout = aiohttp.ClientTimeout(sock_read=TIMEOUT_S, sock_connect=TIMEOUT_S)
    # A POST: aiohttp sends an idempotent GET again on its own when the server drops the connection.
    async with aiohttp.ClientSession(timeout=timeout) as session, session.post(f"{url}/v1/thing") as response:
        response.raise_for_status()
        await response.read()


class TestClients:
    @pytest.mark.parametrize("fault", FAULTS, ids=ids)
    def test_requests(self, fault_server: FaultServer, fault: Fault) -> None:
        exc = raised(lambda: _requests(base_url(fault_server, fault)))
        assert isinstance(exc, requests.RequestException)
        check(exc, fault)

    @pytest.mark.parametrize("fault", FAULTS, ids=ids)
    def test_urllib(self, fault_server: FaultServer, fault: Fault) -> None:
        exc = raised(lambda: _urllib(base_url(fault_server, fault)))
        # urlopen raises HTTPError for a status, URLError around a failed connect, and a read's
        # own socket error (a timeout, a reset) as it is.
        assert isinstance(exc, urllib.error.HTTPError if fault.http else OSError)
        check(exc, fault)

    @pytest.mark.parametrize("fault", FAULTS, ids=ids)
    def test_httpx(self, fault_server: FaultServer, fault: Fault) -> None:
        exc = raised(lambda: _httpx(base_url(fault_server, fault)))
        assert isinstance(exc, httpx.HTTPError)
        check(exc, fault)

    @pytest.mark.parametrize("fault", FAULTS, ids=ids)
    def test_openai_sdk(self, fault_server: FaultServer, fault: Fault) -> None:
        exc = raised(lambda: _openai(base_url(fault_server, fault)))
        assert isinstance(exc, openai.APIError)
        check(exc, fault)

    @pytest.mark.parametrize("fault", FAULTS, ids=ids)
    def test_aiohttp(self, fault_server: FaultServer, fault: Fault) -> None:
        exc = araised(lambda: _aiohttp(base_url(fault_server, fault)))
        assert isinstance(exc, aiohttp.ClientError | TimeoutError)
        check(exc, fault)


class TestUrllib3:
    """urllib3 raises for the connection only; a status is an error once its ``Retry`` gives up on it."""

    @pytest.mark.parametrize("fault", NETWORK, ids=[f.name for f in NETWORK])
    @pytest.mark.parametrize("retries", [False, 0], ids=["raw", "max-retry"])
    def test_network_faults(self, fault_server: FaultServer, fault: Fault, retries: bool | int) -> None:
        url = base_url(fault_server, fault)
        with urllib3.PoolManager(retries=retries, timeout=TIMEOUT_S) as pool:
            exc = raised(lambda: pool.request("GET", f"{url}/v1/thing"))
        assert isinstance(
            exc, urllib3.exceptions.MaxRetryError if retries is not False else urllib3.exceptions.HTTPError
        )
        check(exc, fault)

    def test_a_status_its_retry_gave_up_on(self, fault_server: FaultServer) -> None:
        url = base_url(fault_server, Fault("503", FAULTS[4].reply, "transient", 503))
        retry = urllib3.Retry(total=0, status_forcelist=[503])
        with urllib3.PoolManager(retries=retry, timeout=TIMEOUT_S) as pool:
            exc = raised(lambda: pool.request("GET", f"{url}/v1/thing"))
        assert isinstance(exc, urllib3.exceptions.MaxRetryError)
        got = classify(exc)
        assert got.error_class.value == "transient" and "ResponseError" in got.reason


class TestSockets:
    def _address(self, server: FaultServer, fault: Fault) -> tuple[str, int]:
        host, port = base_url(server, fault).removeprefix("http://").split(":")
        return host, int(port)

    @pytest.mark.parametrize("fault", NETWORK, ids=[f.name for f in NETWORK])
    def test_plain_socket(self, fault_server: FaultServer, fault: Fault) -> None:
        address = self._address(fault_server, fault)

        def get() -> None:
            with socket.create_connection(address, timeout=TIMEOUT_S) as conn:
                conn.sendall(b"GET /v1/thing HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
                assert conn.recv(1024), "no answer"

        exc = raised(get)
        assert isinstance(exc, OSError)
        check(exc, fault)

    @pytest.mark.parametrize("fault", NETWORK, ids=[f.name for f in NETWORK])
    def test_asyncio_streams(self, fault_server: FaultServer, fault: Fault) -> None:
        host, port = self._address(fault_server, fault)

        async def get() -> None:
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(b"GET /v1/thing HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                assert await asyncio.wait_for(reader.read(1024), TIMEOUT_S), "no answer"
            finally:
                writer.close()

        exc = araised(get)
        assert isinstance(exc, OSError)
        check(exc, fault)


class TestErrnos:
    @pytest.mark.parametrize(
        "name", ["ECONNRESET", "ECONNREFUSED", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "EPIPE"]
    )
    def test_a_network_errno_is_transient(self, name: str) -> None:
        import errno

        # OSError() makes ConnectionResetError, BrokenPipeError... of the errnos that have a class.
        got = classify(OSError(getattr(errno, name), "network"))
        assert got.error_class.value == "transient" and name in got.reason, got

    @pytest.mark.parametrize("name", ["ENOENT", "EACCES", "EISDIR", "ENOSPC"])
    def test_any_other_errno_is_terminal(self, name: str) -> None:
        import errno

        got = classify(OSError(getattr(errno, name), "local"))
        assert got.error_class.value == "terminal" and name in got.reason

    def test_name_resolution(self) -> None:
        assert classify(socket.gaierror(socket.EAI_AGAIN, "try again")).error_class.value == "transient"
        assert classify(socket.gaierror(socket.EAI_NONAME, "unknown")).error_class.value == "terminal"

    def test_a_url_error_is_judged_by_its_reason(self) -> None:
        refused = classify(urllib.error.URLError(ConnectionRefusedError(111, "refused")))
        assert refused.error_class.value == "transient" and "ConnectionRefusedError" in refused.reason
        assert classify(urllib.error.URLError("unknown url type: gopher")).error_class.value == "terminal"
