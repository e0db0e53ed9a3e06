"""What the gateway answers on the embedded model is what happened: ``retryctl serve --embedded`` as a real
process on 127.0.0.1 (streams token by token, ``finish_reason``, ``usage`` over every sample, logprobs
and ``response_format`` honoured or refused by name, the ``retryctl`` block and the decision log in
agreement, ``audit --why`` telling the same), and the token stream in process with a decoder the test
holds after its first piece."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from retryctl.gateway._stream import TokenStream
from retryctl.models import Candidate, SamplingParams
from tests.gateway._support import serving
from tests.models.conftest import needs_llama

pytestmark = needs_llama

STORY = [{"role": "user", "content": "Tell me a short story about a cat."}]
SUM = [{"role": "user", "content": "What is 2 + 3? Answer with the number only."}]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``retryctl serve --embedded`` with a decision log; yields its /v1 URL and the log."""
    log = tmp_path_factory.mktemp("embedded") / "decisions.jsonl"
    with serving("--embedded", "--calibration", "none", log=log) as (url, _):
        yield url, log


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + "/chat/completions", json={"model": "smollm2", **body}, timeout=300)


def _events(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The server-sent events of a streamed request, as they came ([DONE] checked and left out)."""
    events: list[dict[str, Any]] = []
    payload = {"model": "smollm2", "stream": True, **body}
    with httpx.stream("POST", url + "/chat/completions", json=payload, timeout=300) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        events.append(json.loads(line.removeprefix("data: ")))
    return events


def _records(log: Path, run_id: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]
    return [r for r in rows if r.get("run_id") == run_id]


class TestPlainStream:
    def test_the_answer_comes_token_by_token_and_is_the_same_answer(self, embedded: tuple[str, Path]) -> None:
        url, _ = embedded
        body = {"messages": STORY, "max_tokens": 24, "temperature": 0.0, "seed": 7}
        events = _events(url, {**body, "stream_options": {"include_usage": True}})
        pieces = [e["choices"][0]["delta"].get("content") for e in events if e["choices"]]
        content = [p for p in pieces if p]
        usage = events[-1]["usage"]
        assert len(content) > 1, "the answer came in one piece"
        assert len(content) <= usage["completion_tokens"]  # at most one chunk a token
        assert events[0]["choices"][0]["delta"]["role"] == "assistant"
        whole = _post(url, body).json()
        assert "".join(content) == whole["choices"][0]["message"]["content"]
        finish = [e["choices"][0]["finish_reason"] for e in events if e["choices"]]
        assert finish[-1] == whole["choices"][0]["finish_reason"] == "length"
        assert usage == whole["usage"]

    def test_a_stop_string_is_never_streamed(self, embedded: tuple[str, Path]) -> None:
        url, _ = embedded
        body = {"messages": STORY, "max_tokens": 40, "temperature": 0.0, "seed": 7}
        free = _post(url, body).json()["choices"][0]["message"]["content"]
        stop = free.split()[3]  # a word the answer reaches: it ends there, unsent
        events = _events(url, {**body, "stop": [stop]})
        content = [e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]]
        whole = _post(url, {**body, "stop": [stop]}).json()["choices"][0]
        assert "".join(content) == whole["message"]["content"] == free[: free.index(stop)]
        assert whole["finish_reason"] == "stop"

    def test_a_json_object_answer_streams_whole_and_is_json(self, embedded: tuple[str, Path]) -> None:
        url, _ = embedded
        events = _events(
            url,
            {
                "messages": [{"role": "user", "content": "Give a JSON object with a key 'n' set to 5."}],
                "max_tokens": 40,
                "seed": 3,
                "response_format": {"type": "json_object"},
            },
        )
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
        assert isinstance(json.loads(text), dict)


class TestFinishReasonAndUsage:
    def test_a_plain_answer_cut_by_max_tokens_says_length(self, embedded: tuple[str, Path]) -> None:
        url, _ = embedded
        done = _post(url, {"messages": STORY, "max_tokens": 3, "seed": 1}).json()
        assert done["choices"][0]["finish_reason"] == "length"
        assert done["usage"]["completion_tokens"] == 3

    def test_an_adaptive_answer_cut_says_length_and_usage_counts_every_sample(
        self, embedded: tuple[str, Path]
    ) -> None:
        url, log = embedded
        body = {
            "messages": STORY,
            "max_tokens": 3,
            "temperature": 1.0,
            "seed": 11,
            "adaptive": True,
            "retryctl": {"min_samples": 3, "max_samples": 4, "answer": "text"},
        }
        done = _post(url, body).json()
        block = done["retryctl"]
        assert done["choices"][0]["finish_reason"] == "length"
        assert block["samples_used"] >= 3
        # Every sample was cut at 3 tokens: the completion tokens are every sample's, not the answer's.
        assert done["usage"]["completion_tokens"] == 3 * block["samples_used"]
        prompt = _post(url, {"messages": STORY, "max_tokens": 1}).json()["usage"]["prompt_tokens"]
        assert done["usage"]["prompt_tokens"] == prompt * block["samples_used"]
        summary = next(r for r in _records(log, block["run_id"]) if r["kind"] == "summary")
        assert summary["budget_used"]["output_tokens"] == done["usage"]["completion_tokens"]


class TestLogprobsAndFormat:
    def test_logprobs_come_back_for_every_token_with_the_alternatives_asked(
        self, embedded: tuple[str, Path]
    ) -> None:
        url, _ = embedded
        body = {"messages": SUM, "max_tokens": 5, "seed": 2, "logprobs": True, "top_logprobs": 2}
        done = _post(url, body).json()
        tokens = done["choices"][0]["logprobs"]["content"]
        assert len(tokens) == done["usage"]["completion_tokens"]
        assert "".join(t["token"] for t in tokens) == done["choices"][0]["message"]["content"]
        assert all(t["logprob"] <= 0.0 and len(t["top_logprobs"]) == 2 for t in tokens)
        plain = _post(url, {"messages": SUM, "max_tokens": 5, "seed": 2}).json()
        assert plain["choices"][0]["logprobs"] is None  # not asked, not sent

    def test_an_adaptive_answer_carries_its_own_logprobs(self, embedded: tuple[str, Path]) -> None:
        url, _ = embedded
        body = {
            "messages": SUM,
            "max_tokens": 4,
            "seed": 5,
            "logprobs": True,
            "adaptive": True,
            "retryctl": {"max_samples": 2},
        }
        done = _post(url, body).json()
        tokens = done["choices"][0]["logprobs"]["content"]
        assert "".join(t["token"] for t in tokens) == done["choices"][0]["message"]["content"]

    def test_a_json_object_answer_is_json(self, embedded: tuple[str, Path]) -> None:
        url, _ = embedded
        body = {
            "messages": [{"role": "user", "content": "Give a JSON object with a key 'n' set to 5."}],
            "max_tokens": 40,
            "seed": 3,
            "response_format": {"type": "json_object"},
        }
        done = _post(url, body).json()
        assert isinstance(json.loads(done["choices"][0]["message"]["content"]), dict)

    @pytest.mark.parametrize(
        ("extra", "param"),
        [
            ({"logprobs": "yes"}, "logprobs"),
            ({"top_logprobs": 3}, "top_logprobs"),  # without logprobs: true
            ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
            ({"response_format": {"type": "yaml"}}, "response_format.type"),
            ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
            # Valid for OpenAI, but the embedded model needs a schema to decode under.
            (
                {"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}},
                "response_format.json_schema",
            ),
            ({"response_format": "json"}, "response_format"),
        ],
    )
    def test_what_cannot_be_honoured_is_a_400_naming_it(
        self, embedded: tuple[str, Path], extra: dict[str, Any], param: str
    ) -> None:
        url, _ = embedded
        for adaptive in ({}, {"adaptive": True}):
            response = _post(url, {"messages": SUM, "max_tokens": 2, **extra, **adaptive})
            assert response.status_code == 400, response.text
            assert response.json()["error"]["param"] == param


class TestRecordAgreesWithResponse:
    def test_the_block_the_records_and_audit_why_tell_the_same(self, embedded: tuple[str, Path]) -> None:
        url, log = embedded
        body = {
            "messages": SUM,
            "max_tokens": 6,
            "temperature": 1.0,
            "seed": 21,
            "adaptive": True,
            "retryctl": {"min_samples": 2, "max_samples": 5, "answer": "number", "threshold": 0.99},
        }
        done = _post(url, body).json()
        block = done["retryctl"]
        records = _records(log, block["run_id"])
        verdicts = [r for r in records if r["kind"] == "verdict"]
        summary = next(r for r in records if r["kind"] == "summary")
        assert len(verdicts) == block["attempts"] == len(block["history"])
        assert verdicts[-1]["action"] == block["verdict"]
        assert summary["final_answer"] == block["answer"]  # accepted or not: what the response carried
        assert summary["budget_used"]["samples"] == block["samples_used"]
        assert sum(h["samples"] for h in block["history"]) == block["samples_used"]
        assert summary["budget_used"]["attempts"] == block["calls"]
        assert [h["action"] for h in summary["sampling_history"]] == [h["action"] for h in block["history"]]
        why = subprocess.run(
            [sys.executable, "-m", "retryctl.cli", "audit", str(log), "--why", block["run_id"]],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert why.returncode == 0, why.stderr
        story = " ".join(why.stdout.split())  # rich wraps long lines
        attempts = block["attempts"]
        assert f"ended after {attempts} attempt{'s' if attempts > 1 else ''} " in story
        assert f"with answer {block['answer']!r}" in story
        assert f"calls {block['calls']}" in story and f"samples {block['samples_used']}" in story

    def test_a_streamed_adaptive_answer_is_the_decided_one_with_its_block(
        self, embedded: tuple[str, Path]
    ) -> None:
        url, log = embedded
        body = {
            "messages": SUM,
            "max_tokens": 6,
            "seed": 4,
            "adaptive": True,
            "retryctl": {"max_samples": 3, "answer": "number"},
        }
        events = _events(url, body)
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
        block = next(e["retryctl"] for e in events if "retryctl" in e)
        summary = next(r for r in _records(log, block["run_id"]) if r["kind"] == "summary")
        assert summary["final_answer"] == block["answer"]
        assert block["answer"] is None or block["answer"] in text


class _Held:
    """The embedded backend with its decoder held after the first piece of text until the test lets it
    go, so what the stream sent by then was sent before decoding ended: no clock involved."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.let_go = threading.Event()
        self.pieces = 0
        self.returned: list[Candidate] = []
        self.done = threading.Event()

    def sample_sync(
        self, messages: Any, params: Any = None, *, k: int = 1, on_text: Any = None
    ) -> list[Candidate]:
        def held(index: int, piece: str) -> bool:
            if piece:
                self.pieces += 1  # counted before the stream can see the piece
            wanted: bool = on_text(index, piece)
            if piece and self.pieces == 1:
                assert self.let_go.wait(timeout=120), "the test never let the decoder go"
            return wanted

        try:
            self.returned = self.backend.sample_sync(messages, params, k=k, on_text=held)
        finally:
            self.done.set()
        return self.returned

    @property
    def name(self) -> str:
        return str(self.backend.name)


@pytest.fixture(scope="module")
def backend() -> Any:
    from retryctl.models import EmbeddedBackend

    return EmbeddedBackend(n_ctx=1024, n_threads=1)


def _stream(held: _Held, max_tokens: int) -> TokenStream:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=9)
    return TokenStream(held, STORY, params, k=1, model="smollm2", include_usage=False, top_logprobs=None)  # type: ignore[arg-type]


class TestTokenStream:
    def test_the_first_piece_is_sent_while_the_rest_is_still_to_decode(self, backend: Any) -> None:
        held = _Held(backend)

        async def go() -> tuple[list[bytes], int]:
            stream = _stream(held, 16)
            await stream.start()
            chunks = stream.chunks()
            first = [await chunks.__anext__(), await chunks.__anext__()]  # role, then the first piece
            decoded_by_then = held.pieces
            held.let_go.set()
            return first + [c async for c in chunks], decoded_by_then

        chunks, decoded_by_then = asyncio.run(go())
        assert decoded_by_then == 1  # the decoder was still on its first token
        content = [json.loads(c[6:])["choices"][0]["delta"].get("content") for c in chunks[:-1]]
        assert len([c for c in content if c]) > 1
        assert "".join(c or "" for c in content) == held.returned[0].text

    def test_a_caller_gone_stops_the_decoding(self, backend: Any) -> None:
        held = _Held(backend)

        async def go() -> None:
            stream = _stream(held, 64)
            await stream.start()
            chunks = stream.chunks()
            await chunks.__anext__()
            await stream.close()  # the response ended: the caller went away
            held.let_go.set()
            assert await asyncio.to_thread(held.done.wait, 120)

        asyncio.run(go())
        # Decoding ended at the token after the caller left, not at max_tokens.
        assert held.returned[0].usage.output_tokens <= 2
