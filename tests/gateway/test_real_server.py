"""``retryctl serve`` as a real process, driven by the ``openai`` SDK and LangChain's ``ChatOpenAI``:
in front of ``python -m llama_cpp.server`` serving the embedded GGUF on 127.0.0.1 (the ``llama_server``
fixture of tests/models/conftest.py), and serving the embedded model itself (``--embedded``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from pydantic import SecretStr

from retryctl.audit import verify_log
from tests.gateway._support import serving
from tests.models.conftest import gguf_path, llama_server, needs_llama  # noqa: F401

pytestmark = needs_llama

QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is 2 + 3? Answer with the number only."}
]


@pytest.fixture(scope="module")
def proxied(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """A gateway in front of the session's llama.cpp server; yields its /v1 URL and its decision log."""
    upstream = str(request.getfixturevalue("llama_server"))
    log = tmp_path_factory.mktemp("gateway") / "decisions.jsonl"
    with serving("--upstream", upstream, "--upstream-model", "smollm2", log=log) as (url, _):
        yield url, log


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)


class TestOpenAISdk:
    def test_a_plain_completion_is_the_upstreams(self, proxied: tuple[str, Path]) -> None:
        url, _ = proxied
        done = _client(url).chat.completions.create(
            model="smollm2", messages=QUESTION, max_tokens=8, temperature=0
        )
        assert done.choices[0].message.content
        assert done.usage is not None and done.usage.completion_tokens > 0
        assert "retryctl" not in (done.model_extra or {})

    def test_a_stream_is_passed_through(self, proxied: tuple[str, Path]) -> None:
        url, _ = proxied
        stream = _client(url).chat.completions.create(
            model="smollm2", messages=QUESTION, max_tokens=8, temperature=0, stream=True
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert len(chunks) > 2 and text  # token by token, as llama.cpp sends them
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")

    def test_adaptive_sampling_says_how_sure_it_is_and_logs_it(self, proxied: tuple[str, Path]) -> None:
        url, log = proxied
        done = _client(url).chat.completions.create(
            model="smollm2",
            messages=QUESTION,
            max_tokens=8,
            temperature=0.7,
            extra_body={
                "adaptive": True,
                "retryctl": {"min_samples": 2, "max_samples": 5, "answer": "number"},
            },
        )
        block = (done.model_extra or {})["retryctl"]
        assert 2 <= block["samples_used"] <= 5 and block["max_samples"] == 5
        assert block["verdict"] in ("accept", "stop")
        assert sum(c["count"] for c in block["candidates"]) == block["samples_used"]
        assert 0.0 <= block["confidence"] <= 1.0
        assert done.choices[0].message.content  # the chosen candidate's own text
        assert done.usage is not None and done.usage.completion_tokens >= block["samples_used"]
        report = verify_log(log)
        assert report.ok and block["run_id"] in log.read_text()
        # The record says what the response says (upstream samples: usage is every sample's).
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        mine = [r for r in rows if r.get("run_id") == block["run_id"]]
        summary = next(r for r in mine if r["kind"] == "summary")
        assert len([r for r in mine if r["kind"] == "verdict"]) == block["attempts"]
        assert summary["final_answer"] == block["answer"]
        assert summary["budget_used"]["samples"] == block["samples_used"]
        assert summary["budget_used"]["attempts"] == block["calls"]
        assert done.choices[0].finish_reason in ("stop", "length")

    def test_a_bad_option_is_a_bad_request_error_naming_it(self, proxied: tuple[str, Path]) -> None:
        url, _ = proxied
        with pytest.raises(openai.BadRequestError) as caught:
            _client(url).chat.completions.create(
                model="smollm2",
                messages=QUESTION,
                extra_body={"adaptive": True, "retryctl": {"max_samplez": 3}},
            )
        assert caught.value.body["param"] == "retryctl.max_samplez"  # type: ignore[index]

    def test_an_unknown_model_is_not_found(self, proxied: tuple[str, Path]) -> None:
        url, _ = proxied
        with pytest.raises(openai.NotFoundError):
            _client(url).chat.completions.create(model="gpt-4o", messages=QUESTION)


class TestChatOpenAI:
    def test_plain_and_adaptive_through_langchain(self, proxied: tuple[str, Path]) -> None:
        from langchain_openai import ChatOpenAI

        url, _ = proxied
        plain = ChatOpenAI(
            base_url=url, api_key=SecretStr("unused"), model="smollm2", max_completion_tokens=8, temperature=0
        )
        assert plain.invoke("What is 2 + 3?").content
        sure = ChatOpenAI(
            base_url=url,
            api_key=SecretStr("unused"),
            model="smollm2",
            max_completion_tokens=8,
            temperature=0.7,
            extra_body={"adaptive": True, "retryctl": {"max_samples": 4, "answer": "number"}},
            include_response_headers=True,
        )
        answer = sure.invoke("What is 2 + 3? Answer with the number only.")
        headers = answer.response_metadata["headers"]
        assert headers["x-retryctl-verdict"] in ("accept", "stop")
        assert 1 <= int(headers["x-retryctl-samples-used"]) <= 4
        assert 0.0 <= float(headers["x-retryctl-confidence"]) <= 1.0
        assert answer.usage_metadata is not None and answer.usage_metadata["output_tokens"] > 0


class TestEmbedded:
    def test_the_embedded_model_served_directly(self, tmp_path: Path) -> None:
        log = tmp_path / "decisions.jsonl"
        with serving("--embedded", log=log) as (url, _):
            client = _client(url)
            assert [m.id for m in client.models.list().data] == ["smollm2"]
            plain = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=8, n=2)
            assert len(plain.choices) == 2
            done = client.chat.completions.create(
                model="smollm2",
                messages=QUESTION,
                max_tokens=8,
                temperature=0.7,
                extra_body={"adaptive": True, "retryctl": {"max_samples": 3, "answer": "number"}},
            )
            block = (done.model_extra or {})["retryctl"]
            assert 1 <= block["samples_used"] <= 3
        audit = subprocess.run(
            [sys.executable, "-m", "retryctl.cli", "audit", str(log)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert audit.returncode == 0, audit.stderr
        assert "chain intact" in audit.stdout
