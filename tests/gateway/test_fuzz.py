"""Generated request bodies (hypothesis) thrown at a running ``retryctl serve`` on 127.0.0.1: wrong types,
missing fields, nested junk, long and unicode strings, bytes that are not JSON, other content types.
Whatever comes in: no 5xx, no traceback in the server's log, every 4xx in OpenAI's error shape and, when
the body was a JSON object, naming the field (``param``).

The gateway proxies bench/_latency_server.py (no delay) for most of the examples, plain and adaptive; a
smaller share goes to ``retryctl serve --embedded`` (the real model, bodies that cannot be valid, so
nothing is decoded). ``RETRYCTL_FUZZ_EXAMPLES`` scales the counts (default 800 upstream, 150 embedded):

    RETRYCTL_FUZZ_EXAMPLES=20000 pytest tests/gateway/test_fuzz.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway._support import free_port, latency_upstream
from tests.models.conftest import needs_llama

_SCALE = int(os.environ.get("RETRYCTL_FUZZ_EXAMPLES", "800"))


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,  # nothing written in the checkout
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


# -- bodies --------------------------------------------------------------------------------------------

_NASTY = st.sampled_from(
    [
        "",
        "\x00",
        "Ω≈ç√∫˜µ≤≥÷ 🤖 \u202eright-to-left",
        "a" * 100_000,
        "{" * 2_000,
        "None",
        "null",
        "1e400",
    ]
)
_UTF8 = st.text(st.characters(codec="utf-8"), max_size=40)  # lone surrogates only where asked for below
_TEXT = st.one_of(_UTF8, _UTF8, _UTF8, _NASTY)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-1000, max_value=2**31),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),  # what the gateway's JSON reader still takes
    st.sampled_from([2**63, 2**64, -(2**70)]),  # past what the gateway's JSON reader takes
    st.floats(allow_nan=False, allow_infinity=False),
    _TEXT,
)
JUNK = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)


def _weighted(*kinds: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each drawn about as often as its weight says (shrinking towards the
    first): hypothesis's ``one_of`` draws its branches about evenly."""
    by_draw = [strategy for weight, strategy in kinds for _ in range(weight)]
    return st.integers(0, len(by_draw) - 1).flatmap(lambda i: by_draw[i])


def _maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a plausible value, sometimes junk."""
    return _weighted((5, valid), (1, JUNK))


def _object(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A dict with any subset of ``fields``, each plausible or junk, now and then an unknown key."""
    return st.fixed_dictionaries({}, optional={k: _maybe(v) for k, v in fields.items()} | {"zz": JUNK})


_PART = _object(
    type=st.sampled_from(["text", "image_url", "input_audio", "file", "refusal", "video"]),
    text=_TEXT,
    image_url=_object(url=_TEXT, detail=st.sampled_from(["auto", "low"])),
    input_audio=_object(data=_TEXT, format=st.sampled_from(["wav", "mp3"])),
    refusal=_TEXT,
)
_CONTENT = st.none() | _TEXT | st.lists(_PART, max_size=3)
_CALL = _object(
    id=st.sampled_from(["c1", "c2"]),
    type=st.sampled_from(["function", "custom"]),
    function=_object(name=_TEXT, arguments=st.just("{}") | _TEXT),
)
_ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "bot"])
_MESSAGE_FIELDS = {
    "name": _TEXT,
    "tool_calls": st.lists(_CALL, max_size=2),
    "tool_call_id": st.sampled_from(["c1", "c2"]),
    "refusal": _TEXT,
}
MESSAGE = _weighted(
    # Mostly a role and content, plausible or junk, with any of the other fields.
    (
        12,
        st.fixed_dictionaries(
            {"role": _maybe(_ROLES), "content": _maybe(_CONTENT)},
            optional={k: _maybe(v) for k, v in _MESSAGE_FIELDS.items()},
        ),
    ),
    (
        2,
        st.fixed_dictionaries(
            {"role": _maybe(_ROLES)}, optional={k: _maybe(v) for k, v in _MESSAGE_FIELDS.items()}
        ),
    ),
    (2, _object(role=_ROLES, content=_CONTENT, **_MESSAGE_FIELDS)),
    (1, JUNK),
)
_TOP = {
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0.01, 1),
    "n": st.integers(1, 3),
    "max_tokens": st.integers(1, 8),
    "max_completion_tokens": st.integers(1, 8),
    "seed": st.integers(0, 2**31),
    "stop": _TEXT | st.lists(_TEXT, max_size=3),
    "stream": st.booleans(),
    "logprobs": st.booleans(),
    "top_logprobs": st.integers(0, 5),
    "presence_penalty": st.floats(-2, 2),
    "logit_bias": st.dictionaries(st.sampled_from(["1", "2"]), st.integers(-100, 100), max_size=2),
    "user": _TEXT,
    "response_format": _object(type=st.sampled_from(["text", "json_object", "json_schema"])),
    "stream_options": _object(include_usage=st.booleans()),
    "tools": st.lists(_object(type=st.just("function"), function=_object(name=_TEXT)), max_size=2),
    "tool_choice": st.sampled_from(["auto", "none"]),
    "adaptive": st.booleans(),
    "retryctl": _object(
        policy=st.sampled_from(["default", "sc-5", "esc", "nope"]),
        min_samples=st.integers(1, 3),
        max_samples=st.integers(1, 3),
        threshold=st.floats(0, 1),
        answer=st.sampled_from(["auto", "number", "text", "vibes"]),
        budget=_object(samples=st.integers(0, 4), wall_s=st.floats(0, 5), output_tokens=st.integers(0, 64)),
    ),
}


def bodies(model: str) -> st.SearchStrategy[dict[str, Any]]:
    """A request body: mostly ``model`` right and a few plausible ``messages``, with any of OpenAI's
    other fields plausible or junk; sometimes any of them missing or junk."""
    top = {k: _maybe(v) for k, v in _TOP.items()}
    messages = st.lists(MESSAGE, min_size=1, max_size=4)
    usual = st.fixed_dictionaries({"model": st.just(model), "messages": messages}, optional=top)
    wild = st.fixed_dictionaries(
        {}, optional={"model": _maybe(st.just(model)), "messages": _maybe(messages)} | top
    )
    return _weighted((6, usual), (1, wild))


@dataclass(frozen=True)
class Sent:
    """One request as it goes on the wire."""

    content: bytes
    content_type: str | None

    def was_json_object(self) -> bool:
        """Whether the gateway's JSON reader (orjson: 64-bit integers, valid UTF-8) reads an object."""
        try:
            return isinstance(orjson.loads(self.content), dict)
        except orjson.JSONDecodeError:
            return False


_CONTENT_TYPES = st.sampled_from(
    ["application/json", "application/json", "text/plain", "application/x-www-form-urlencoded", None]
)


def _encoded(body: Any) -> bytes:
    # The standard library writes what orjson refuses (integers past 64 bits, lone surrogates as
    # escapes), so those reach the gateway too.
    return json.dumps(body).encode()


def requests(model: str) -> st.SearchStrategy[Sent]:
    """Bodies as JSON (80 %, adaptive or not), JSON that is not a body, cut JSON, bytes, a lone surrogate."""
    bodied = bodies(model).map(_encoded)
    # Adaptive ones as often again: the gateway itself samples those, so every message reaches it.
    decided = bodies(model).map(lambda b: _encoded({**b, "adaptive": True, "retryctl": {"max_samples": 2}}))
    content = _weighted(
        (25, bodied),
        (15, decided),
        (4, JUNK.map(_encoded)),
        (3, bodied.map(lambda b: b[: len(b) // 2])),
        (2, st.binary(max_size=200)),
        # A lone surrogate, escaped as JSON allows: not text a UTF-8 reader can take.
        (1, bodies(model).map(lambda b: _encoded({**b, "user": "\ud800"}))),
    )
    return st.builds(Sent, content, _CONTENT_TYPES)


# -- servers -------------------------------------------------------------------------------------------


@dataclass
class Running:
    """A gateway process: its base URL and the file its stderr (the server log) goes to."""

    url: str
    log: Path
    client: httpx.Client

    def send(self, sent: Sent) -> httpx.Response:
        headers = {} if sent.content_type is None else {"content-type": sent.content_type}
        return self.client.post(self.url + "/v1/chat/completions", content=sent.content, headers=headers)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """bench/_latency_server.py answering at once; its /v1 URL."""
    with latency_upstream(0) as url:
        yield url


def _gateway(args: list[str], log: Path) -> Iterator[Running]:
    port = free_port()
    command = [sys.executable, "-m", "retryctl.cli", "serve", *args, "--port", str(port)]
    with log.open("w") as sink:
        # The log goes to a file: a pipe nobody reads could fill and stall the server under test.
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=sink)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=60) as client:
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, log.read_text()
                try:
                    if client.get(url + "/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the gateway did not come up in 120 s"
                time.sleep(0.1)
            yield Running(url, log, client)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def proxying(upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    log = tmp_path_factory.mktemp("fuzz") / "proxy.log"
    yield from _gateway(["--upstream", upstream, "--upstream-model", "latency", "--retries", "1"], log)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    log = tmp_path_factory.mktemp("fuzz") / "embedded.log"
    yield from _gateway(["--embedded"], log)


# -- checks --------------------------------------------------------------------------------------------


def _check(running: Running, sent: Sent, response: httpx.Response) -> None:
    shown = f"{response.status_code} {response.text[:300]!r} for {sent.content[:300]!r}"
    assert response.status_code < 500, shown
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, shown
        assert isinstance(error["message"], str) and error["message"], shown
        assert isinstance(error["type"], str) and isinstance(error["code"], str), shown
        if sent.was_json_object():
            assert isinstance(error["param"], str) and error["param"], shown
    log = running.log_text()
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]


class TestFuzzProxying:
    """Against ``retryctl serve --upstream`` (the latency server): plain and adaptive."""

    @_settings(_SCALE)
    @given(sent=requests("latency"))
    def test_no_body_is_a_5xx_or_a_traceback(self, proxying: Running, sent: Sent) -> None:
        _check(proxying, sent, proxying.send(sent))

    @pytest.mark.parametrize("adaptive", [False, True])
    def test_valid_shapes_are_answered(self, proxying: Running, adaptive: bool) -> None:
        from tests.gateway.test_messages import CONTENT_PARTS, TOOL_CONVERSATION

        for messages in (TOOL_CONVERSATION, CONTENT_PARTS):
            body: dict[str, Any] = {"model": "latency", "messages": messages}
            if adaptive:
                body |= {"adaptive": True, "retryctl": {"max_samples": 2}}
            response = proxying.send(Sent(_encoded(body), "application/json"))
            assert response.status_code == 200, response.text
            assert response.json()["choices"][0]["message"]["content"] == "The answer is 42."


def _cannot_be_valid(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with one message the OpenAI API refuses (a user message without content) put first: the
    embedded model is never asked to decode."""
    messages = body.get("messages")
    rest = messages if isinstance(messages, list) else []
    return {**body, "model": "smollm2", "messages": [{"role": "user"}, *rest]}


@needs_llama
class TestFuzzEmbedded:
    """Against ``retryctl serve --embedded`` (the real model loaded; nothing decoded)."""

    @_settings(max(20, _SCALE * 3 // 16))
    @given(body=bodies("smollm2").map(_cannot_be_valid), content_type=_CONTENT_TYPES)
    def test_no_body_is_a_5xx_or_a_traceback(
        self, embedded: Running, body: dict[str, Any], content_type: str | None
    ) -> None:
        sent = Sent(_encoded(body), content_type)
        response = embedded.send(sent)
        _check(embedded, sent, response)
        assert 400 <= response.status_code < 500  # never valid: never a 200

    def test_a_tool_call_conversation_is_answered(self, embedded: Running) -> None:
        from tests.gateway.test_messages import CONTENT_PARTS, TOOL_CONVERSATION

        for messages in (TOOL_CONVERSATION, CONTENT_PARTS):
            body = {"model": "smollm2", "messages": messages, "max_tokens": 4, "seed": 1}
            response = embedded.send(Sent(_encoded(body), "application/json"))
            assert response.status_code == 200, response.text
            assert response.json()["choices"][0]["message"]["role"] == "assistant"

    def test_a_prompt_past_the_context_is_a_400(self, embedded: Running) -> None:
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "word " * 5000}]}
        response = embedded.send(Sent(_encoded(body), "application/json"))
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert "fills the context" in error["message"] and error["code"] == "upstream_refused"
