"""Staged samples through a real ``python -m llama_cpp.server`` on 127.0.0.1: one request per stage."""

from __future__ import annotations

import asyncio
import json

import pytest

from retryctl.exceptions import ConfigError
from retryctl.models import OpenAIBackend, SamplingParams, Stage
from retryctl.models._prompt_bound import prompt_tokens_bound
from retryctl.models._stages import staged_input_bound
from retryctl.nodes._sampling import _text_bound
from tests.models._fault_server import FaultServer, raw
from tests.models.conftest import needs_llama

Q = [{"role": "user", "content": "What is 12 + 7? Think it through, then answer."}]
THINK = Stage(name="think", temperature=0.0, max_tokens=24, start="<think>\n", end=("</think>",))
ANSWER = Stage(
    name="answer", temperature=1.0, top_k=1000, top_p=1.0, min_p=0.0, max_tokens=12, start="\nAnswer:"
)


class TestStageModeIsExplicit:
    def test_completions_mode_needs_the_template(self):
        with pytest.raises(ConfigError) as err:
            OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1", stage_mode="completions")
        assert err.value.field == "render_prompt"
        with pytest.raises(ConfigError) as err:
            OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1", stage_mode="prefill")  # type: ignore[arg-type]
        assert err.value.field == "stage_mode"

    def test_a_staged_draw_without_a_mode_is_refused_before_any_request(self):
        # Port 9 (discard) would fail any request: the refusal comes first.
        backend = OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1")
        with pytest.raises(ConfigError) as err:
            asyncio.run(backend.sample(Q, SamplingParams(stages=(THINK, ANSWER))))
        assert err.value.field == "stage_mode"

    def test_a_ray_worker_builds_the_server_with_the_record_s_stage_mode(self):
        from retryctl.record import BankJob, RecordPlan

        plan = RecordPlan(samples=1, params=SamplingParams(stages=(THINK, ANSWER)))
        job = BankJob(plan=plan, base_url="http://127.0.0.1:9/v1", model_name="m", stage_mode="continue")
        model = job.build(None)
        assert isinstance(model, OpenAIBackend) and model.stage_mode == "continue"
        with pytest.raises(ConfigError) as err:  # completions without its template: refused, as built
            BankJob(
                plan=plan, base_url="http://127.0.0.1:9/v1", model_name="m", stage_mode="completions"
            ).build(None)
        assert err.value.field == "render_prompt"


@needs_llama
class TestStagesOnLlamaServer:
    @pytest.fixture
    def backend(self, llama_server, embedded):
        return OpenAIBackend(
            model="smollm2",
            base_url=llama_server,
            timeout_s=120,
            stage_mode="completions",
            render_prompt=embedded.render_prompt,
        )

    def test_two_stages_two_requests_each_continuing_the_text(self, backend):
        # As on the embedded model, a greedy near tie can flip with how the prompt was batched: one
        # sample first, so that those below all read the same cached prefix (docs/models.md).
        asyncio.run(backend.sample(Q, SamplingParams(seed=0, stages=(THINK, ANSWER))))
        cands = [
            asyncio.run(backend.sample(Q, SamplingParams(seed=s, stages=(THINK, ANSWER))))[0]
            for s in (1, 2, 3)
        ]
        for cand in cands:
            think, answer = cand.stages
            assert cand.text == think.text + answer.text
            assert think.text.startswith("<think>\n") and think.text.endswith("</think>")
            assert answer.text.startswith("\nAnswer:")
            assert cand.usage.output_tokens == think.tokens + answer.tokens
            assert cand.logprobs is not None and len(cand.logprobs) == cand.usage.output_tokens
            # The second request's prompt held the first stage's text: it billed more prompt tokens.
            assert answer.prompt_tokens is not None and think.prompt_tokens is not None
            assert answer.prompt_tokens >= think.prompt_tokens + think.tokens
            # What a draw reserves bounds what each staged sample is billed (every request whole).
            bound = staged_input_bound(prompt_tokens_bound([Q[0]["content"]]), (THINK, ANSWER), _text_bound)
            assert think.prompt_tokens + answer.prompt_tokens == cand.usage.input_tokens <= bound
        assert len({c.stages[0].text for c in cands}) == 1  # the think stage at temperature 0
        assert len({c.stages[1].text for c in cands}) > 1  # the answer stage at 1.0

    def test_k_staged_samples_in_one_call(self, backend):
        cands = asyncio.run(backend.sample(Q, SamplingParams(seed=7, stages=(THINK, ANSWER)), k=2))
        assert len(cands) == 2 and all(len(c.stages) == 2 for c in cands)
        assert [c.seed for c in cands] == [7, 8]


def _chat(text: str, *, stop_reason: str | None, prompt: int, cached: int) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    if stop_reason is not None:
        choice["stop_reason"] = stop_reason  # vLLM names the stop string it met
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return json.dumps({"choices": [choice], "usage": usage}).encode()


class TestContinueModeOnTheWire:
    """The request shape of ``stage_mode="continue"`` (vLLM's fields), read off a real HTTP server."""

    def test_each_stage_continues_a_final_assistant_message_with_its_own_knobs(self):
        server = FaultServer().start()
        try:
            server.script.extend(
                [
                    raw(_chat("x = 1", stop_reason="</t>", prompt=20, cached=0)),
                    raw(_chat(" 1", stop_reason=None, prompt=30, cached=24)),
                ]
            )
            backend = OpenAIBackend(model="m", base_url=server.url, stage_mode="continue")
            think = Stage(
                name="think",
                temperature=0.0,
                top_k=5,
                max_tokens=40,
                start="<think>\n",
                end=("</think>", "</t>"),
            )
            answer = Stage(name="answer", max_tokens=8, start="\nAnswer:")
            params = SamplingParams(
                temperature=0.8, top_p=0.9, seed=3, stop=("\n\n",), stages=(think, answer)
            )
            [cand] = asyncio.run(backend.sample(Q, params))
        finally:
            server.stop()
        first, second = server.requests
        assert first["messages"] == [*Q, {"role": "assistant", "content": "<think>\n"}]
        assert first["continue_final_message"] is True and first["add_generation_prompt"] is False
        assert (first["temperature"], first["top_k"], first["top_p"], first["max_tokens"]) == (
            0.0,
            5,
            0.9,
            40,
        )
        assert first["stop"] == ["</think>", "</t>"]  # the draw's stop only on the last stage
        # The end string the server met (and cut) is put back before the next stage continues.
        assert second["messages"][-1] == {"role": "assistant", "content": "<think>\nx = 1</t>\nAnswer:"}
        assert (second["temperature"], second["max_tokens"], second["stop"]) == (0.8, 8, ["\n\n"])
        assert second["seed"] != first["seed"]
        assert cand.text == "<think>\nx = 1</t>\nAnswer: 1"
        # Billed: both prompts whole; evaluated: less what the server said it had cached.
        assert cand.usage.input_tokens == 50
        assert [s.prompt_tokens for s in cand.stages] == [20, 6]


@needs_llama
class TestRecordStagesOnLlamaServer:
    """``retryctl record --stage ... --base-url`` against a real ``llama_cpp.server``."""

    def test_completions_mode_records_each_stage_from_the_server(self, llama_server, gguf_path, tmp_path):
        from typer.testing import CliRunner

        from retryctl.banks import load_bank
        from retryctl.cli import app

        tasks, bank = tmp_path / "tasks.jsonl", tmp_path / "bank.jsonl"
        tasks.write_text(json.dumps({"id": "a", "question": "What is 12 + 7?", "gold": "19"}) + "\n")
        stages = ["--stage", "think:temperature=0,max_tokens=16,start=<think>\\n,end=</think>"]
        stages += ["--stage", "answer:max_tokens=8,start=\\nAnswer:"]
        server = ["--base-url", llama_server, "--model-name", "smollm2"]
        mode = ["--stage-mode", "completions", "--chat-template-gguf", str(gguf_path)]
        args = ["record", str(tasks), "--out", str(bank), "--samples", "2", "--extract", "number"]
        done = CliRunner().invoke(app, [*args, *stages, *mode, *server])
        assert done.exit_code == 0, done.output
        [question] = load_bank(bank)
        for sample in question.samples:
            think, answer = sample.stage_texts() or ("", "")
            assert [s.name for s in sample.stages] == ["think", "answer"]
            assert (
                think.startswith("<think>\n")
                and think.endswith("</think>")
                and answer.startswith("\nAnswer:")
            )
            # a server bills each stage's prompt whole: the answer stage's held the think stage's text
            first, second = sample.stages
            assert first.prompt_tokens is not None and second.prompt_tokens is not None
            assert second.prompt_tokens >= first.prompt_tokens + first.tokens
            # the bank's answer is the answer stage's, never a delimiter
            assert sample.answer is None or "<" not in sample.answer
