"""Samples cut short on an OpenAI-compatible server: streamed, watched token by token, the stream closed.

Against the scripted fault server (exact chunks, broken streams, a server refusing ``stream``) and
against a real ``llama_cpp.server`` serving the embedded model.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest

from retryctl._cut import cut_point
from retryctl.controller import Ledger, default_equivalence
from retryctl.controller.stopping import ConfidenceWeighted
from retryctl.models import (
    CapabilityRegistry,
    MalformedResponse,
    OpenAIBackend,
    RetrySettings,
    SamplingParams,
    TerminalBackendError,
    ToolSpec,
    TransientBackendError,
)
from retryctl.models._types import CUT_WINDOW
from retryctl.nodes._sampling import SamplingSchedule, run_async, sampling
from tests.models._fault_server import FaultServer, Reply, ok, raw, status
from tests.models.conftest import needs_llama

Q = [{"role": "user", "content": "What is 6*7?"}]
SURE, UNSURE = math.log(0.99), math.log(0.2)


def _chunk(content: str | None, logprob: float | None, finish: str | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": {"content": content} if content else {}}
    choice["finish_reason"] = finish
    choice["logprobs"] = (
        None if logprob is None else {"content": [{"token": content, "logprob": logprob, "top_logprobs": []}]}
    )
    return {"id": "s1", "object": "chat.completion.chunk", "choices": [choice]}


def sse(
    logprobs: list[float], *, finish: str | None = "stop", done: bool = True, tokens: list[str] | None = None
) -> bytes:
    """A chat-completion stream of one token per chunk (``tokens``, by default ``t{i} ``), ending as told."""
    tokens = tokens or [f"t{i} " for i in range(len(logprobs))]
    role = {"index": 0, "delta": {"role": "assistant"}}
    events = [{"id": "s1", "object": "chat.completion.chunk", "choices": [role]}]
    events += [_chunk(token, lp) for token, lp in zip(tokens, logprobs, strict=True)]
    if finish is not None:
        events.append(_chunk(None, None, finish))
    text = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


def said(answer: str, length: int = 20) -> list[str]:
    """The tokens of a sample that says ``answer`` and runs to ``length`` tokens."""
    return [f"The answer is {answer}."] + [" ok"] * (length - 1)


def posted(answer: str, logprobs: list[float]) -> Any:
    """A whole (not streamed) completion of one choice with these tokens' logprobs."""
    tokens = said(answer, len(logprobs))
    content = [
        {"token": t, "logprob": lp, "top_logprobs": []} for t, lp in zip(tokens, logprobs, strict=True)
    ]
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "".join(tokens)},
        "finish_reason": "stop",
    }
    choice["logprobs"] = {"content": content}
    usage = {"prompt_tokens": 9, "completion_tokens": len(tokens)}
    return raw(
        json.dumps({"id": "c", "object": "chat.completion", "choices": [choice], "usage": usage}).encode()
    )


def stream(body: bytes) -> Any:
    return raw(body, content_type="text/event-stream")


def make(server: FaultServer, **kwargs: Any) -> OpenAIBackend:
    async def no_wait(seconds: float) -> None:
        pass

    kwargs.setdefault("retry", RetrySettings(attempts=3, initial_wait_s=0.01, jitter=False))
    return OpenAIBackend(
        model="fault-model", base_url=server.url, timeout_s=5.0, sleep=no_wait,
        capabilities=CapabilityRegistry(), **kwargs,
    )  # fmt: skip


class TestStreamCutOnAScriptedServer:
    def test_a_sample_is_cut_at_the_token_its_window_falls_below_the_bound(self, fault_server):
        logprobs = [SURE] * 20 + [UNSURE] * 30
        fault_server.script.append(stream(sse(logprobs)))
        params = SamplingParams(seed=1, cut_below=0.5, max_tokens=64)
        [cand] = asyncio.run(make(fault_server).sample(Q, params))
        expected = cut_point(logprobs, 0.5, CUT_WINDOW)
        assert expected is not None and CUT_WINDOW < expected < len(logprobs)
        assert cand.finish_reason == "cut"
        assert cand.logprobs is not None and len(cand.logprobs) == expected
        assert cand.text == "".join(f"t{i} " for i in range(expected))
        assert cand.usage.output_tokens == expected
        assert any("no usage" in note for note in cand.notes)
        [req] = fault_server.requests
        assert req["stream"] is True and req["logprobs"] is True and "n" not in req
        assert req["stream_options"] == {"include_usage": True}

    def test_a_cut_stream_is_billed_the_prompt_tokens_the_server_reported_for_its_prompt(self, fault_server):
        fault_server.script.extend([posted("7", [SURE] * 20), stream(sse([SURE] * 20 + [UNSURE] * 20))])
        fault_server.script.append(stream(sse([SURE] * 20 + [UNSURE] * 20)))
        backend = make(fault_server)
        asyncio.run(backend.sample(Q, SamplingParams(seed=1)))  # reports 9 prompt tokens
        [cut] = asyncio.run(backend.sample(Q, SamplingParams(seed=2, cut_below=0.5)))
        assert cut.finish_reason == "cut" and cut.usage.input_tokens == 9
        assert any("reported them for this prompt before" in note for note in cut.notes)
        assert not any("prompt tokens unknown" in note for note in cut.notes)
        # Another prompt was never reported: its tokens stay unknown, and say so.
        other = [{"role": "user", "content": "And 6*8?"}]
        [unknown] = asyncio.run(backend.sample(other, SamplingParams(seed=3, cut_below=0.5)))
        assert unknown.usage.input_tokens == 0 and any("prompt tokens unknown" in n for n in unknown.notes)

    def test_a_sure_sample_streams_whole(self, fault_server):
        fault_server.script.append(stream(sse([SURE] * 30)))
        [cand] = asyncio.run(make(fault_server).sample(Q, SamplingParams(cut_below=0.5)))
        assert cand.finish_reason == "stop" and cand.logprobs is not None and len(cand.logprobs) == 30

    def test_a_stream_read_to_its_end_takes_its_usage_chunk(self, fault_server):
        usage = {"id": "s1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 30}}
        body = sse([SURE] * 30, done=False) + f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode()
        fault_server.script.append(stream(body))
        [cand] = asyncio.run(make(fault_server).sample(Q, SamplingParams(cut_below=0.5)))
        assert (cand.usage.input_tokens, cand.usage.output_tokens) == (9, 30) and not cand.notes

    def test_a_server_ignoring_stream_is_read_as_a_whole_completion(self, fault_server):
        fault_server.script.append(posted("7", [UNSURE] * 20))
        [cand] = asyncio.run(make(fault_server).sample(Q, SamplingParams(cut_below=0.5)))
        assert fault_server.requests[0]["stream"] is True
        assert cand.text.startswith("The answer is 7.") and cand.finish_reason == "stop"
        assert cand.usage.input_tokens == 9  # its body's usage, uncut: it was never watched

    def test_k_samples_stream_one_request_each(self, fault_server):
        fault_server.script.extend(stream(sse([SURE] * 4)) for _ in range(3))
        cands = asyncio.run(make(fault_server).sample(Q, SamplingParams(seed=10, cut_below=0.5), k=3))
        assert len(cands) == 3 and all(c.finish_reason == "stop" for c in cands)
        assert sorted(r["seed"] for r in fault_server.requests) == [10, 11, 12]
        assert all(r["stream"] is True and "n" not in r for r in fault_server.requests)

    def test_no_bound_no_stream(self, fault_server):
        asyncio.run(make(fault_server).sample(Q, SamplingParams()))
        assert "stream" not in fault_server.requests[0]

    def test_tools_are_not_streamed(self, fault_server):
        calc = ToolSpec.coerce(
            {"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}
        )
        asyncio.run(make(fault_server).sample(Q, SamplingParams(cut_below=0.5, tools=(calc,))))
        assert "stream" not in fault_server.requests[0]

    def test_a_stream_broken_off_is_transient_and_drawn_again(self, fault_server):
        fault_server.script.extend(
            [stream(sse([SURE] * 3, finish=None, done=False)), stream(sse([SURE] * 5))]
        )
        [cand] = asyncio.run(make(fault_server).sample(Q, SamplingParams(cut_below=0.5)))
        assert len(fault_server.requests) == 2 and cand.finish_reason == "stop"
        assert cand.logprobs is not None and len(cand.logprobs) == 5

    def test_a_stream_broken_off_every_time_says_so(self, fault_server):
        fault_server.script.extend(stream(sse([SURE], finish=None)) for _ in range(3))
        with pytest.raises(TransientBackendError, match=r"ended before a finish reason.*interrupt_requests"):
            asyncio.run(make(fault_server).sample(Q, SamplingParams(cut_below=0.5)))

    def test_a_malformed_chunk_names_its_field(self, fault_server):
        bad = {"id": "s1", "choices": [{"index": 0, "delta": {}, "logprobs": {"content": [{"token": "x"}]}}]}
        fault_server.script.append(stream(f"data: {json.dumps(bad)}\n\n".encode()))
        backend = make(fault_server, retry=RetrySettings(attempts=1))
        with pytest.raises(MalformedResponse, match=r"choices\.0\.logprobs\.content\.0\.logprob"):
            asyncio.run(backend.sample(Q, SamplingParams(cut_below=0.5)))

    def test_a_server_refusing_stream_is_learnt_and_samples_go_uncut(self, fault_server):
        body = json.dumps({"error": {"message": "'stream' is not supported", "type": "invalid_request"}})
        refusal = Reply("raw", status=400, body=body.encode(), headers={"Content-Type": "application/json"})
        fault_server.script.extend([refusal, ok()])
        backend = make(fault_server)
        [cand] = asyncio.run(backend.sample(Q, SamplingParams(cut_below=0.5)))
        assert fault_server.requests[0]["stream"] is True and "stream" not in fault_server.requests[1]
        assert "stream" in backend.capabilities.refused
        assert cand.text == "42-0" and any("without stream" in note for note in cand.notes)

    def test_a_status_error_on_a_stream_is_classified(self, fault_server):
        fault_server.script.append(status(401))
        with pytest.raises(TerminalBackendError, match="HTTP 401"):
            asyncio.run(make(fault_server).sample(Q, SamplingParams(cut_below=0.5)))


class TestTheSamplingLoopCutsThroughTheStream:
    def test_samples_drawn_once_a_bound_is_set_stream_and_a_doubtful_one_is_cut(self, fault_server):
        # Three sure samples that disagree (the first two set the bound, 0.99), drawn whole; then every
        # draw streams: a sample that turns doubtful is cut, and sure ones for "7" settle the vote.
        fault_server.script.extend(
            [posted("7", [SURE] * 20), posted("8", [SURE] * 20), posted("9", [SURE] * 20)]
        )
        fault_server.script.append(stream(sse([SURE] * 8 + [UNSURE] * 12, tokens=said("9"))))
        fault_server.script.extend(stream(sse([SURE] * 20, tokens=said("7"))) for _ in range(8))
        loop = sampling(
            messages=Q,
            model="fault-model",
            attempt=1,
            min_samples=1,
            max_samples=8,
            rule=ConfidenceWeighted(),
            equivalence=default_equivalence,
            schedule=SamplingSchedule(seed=1, max_tokens=32),
            ledgers=[ledger := Ledger()],
        )
        out = asyncio.run(run_async(loop, make(fault_server, n_mode="parallel"), Q))
        streamed = ["stream" in r for r in fault_server.requests]
        assert streamed[:3] == [False, False, False] and all(streamed[3:]) and len(streamed) > 4
        # The second draw's two requests go at once: which of them gets "8" and which "9" is a race.
        assert {c["answer"] for c in out.candidates[:3]} == {"7", "8", "9"}
        cut = [c for c in out.candidates if c.get("cut")]
        assert len(cut) == 1 and cut[0]["answer"] is None
        # The text and tokens read up to the cut: 8 sure, then the 8 that brought the window down.
        assert cut[0]["text"] == "".join(said("9", CUT_WINDOW))
        # Charged like any sample: 20 tokens for each whole one, 16 for the cut one.
        whole = len(out.candidates) - 1
        assert ledger.used().output_tokens == 20 * whole + CUT_WINDOW
        assert out.stop is not None and out.stop.leader == "7"


STORY = [{"role": "user", "content": "Tell me a long story about a cat who sails the sea."}]


@needs_llama
class TestStreamCutOnLlamaServer:
    # Streamed and posted completions of one seed are not the same tokens on llama.cpp's server (its
    # prompt cache changes the logits in the last digits), so each check reads the stream's own tokens.
    def test_the_stream_is_closed_at_the_token_the_shared_check_cuts(self, llama_server):
        backend = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120)
        [whole] = asyncio.run(backend.sample(STORY, SamplingParams(temperature=0.8, max_tokens=96, seed=3)))
        assert whole.logprobs is not None and len(whole.logprobs) == 96
        lps = [t.logprob for t in whole.logprobs]
        windows = sorted(
            math.exp(math.fsum(lps[i : i + CUT_WINDOW]) / CUT_WINDOW)
            for i in range(len(lps) - CUT_WINDOW + 1)
        )
        bound = windows[3 * len(windows) // 4]  # above most windows of this kind of sample: it is cut
        params = SamplingParams(temperature=0.8, max_tokens=96, seed=4, cut_below=bound)
        [cut] = asyncio.run(backend.sample(STORY, params))
        assert cut.finish_reason == "cut"
        assert cut.logprobs is not None and CUT_WINDOW <= len(cut.logprobs) < 96
        # Not a token before the check fired, nor one after.
        assert cut_point([t.logprob for t in cut.logprobs], bound, CUT_WINDOW) == len(cut.logprobs)
        assert cut.text == "".join(t.token for t in cut.logprobs)
        assert cut.usage.output_tokens == len(cut.logprobs)
        # The server took the closed stream as ended: it answers the next request.
        [after] = asyncio.run(backend.sample(Q, SamplingParams(temperature=0.0, max_tokens=4, seed=1)))
        assert after.finish_reason in ("stop", "length")

    def test_a_stream_above_the_bound_is_read_whole(self, llama_server):
        backend = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120)
        params = SamplingParams(temperature=0.7, max_tokens=24, seed=9, cut_below=1e-6)
        [cand] = asyncio.run(backend.sample(Q, params))
        assert cand.finish_reason in ("stop", "length")
        assert cand.logprobs is not None and cand.text == "".join(t.token for t in cand.logprobs)
        # llama.cpp's server adds the drawn token to its alternatives when it is not among the top ones.
        assert all(t.logprob <= 1e-6 and 0 < len(t.top) <= params.top_logprobs + 1 for t in cand.logprobs)
