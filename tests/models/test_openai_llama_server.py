"""OpenAIBackend against a real ``python -m llama_cpp.server`` serving the embedded model on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path

from retryctl.agent._prompts import EXPRESSION_FORMAT
from retryctl.audit import verify_log
from retryctl.models import CapabilityRegistry, OpenAIBackend, SamplingParams
from tests.models.conftest import needs_llama

Q = [{"role": "user", "content": "Name a colour."}]
RETRYCTL = Path(sys.executable).parent / "retryctl"


@needs_llama
class TestOpenAIBackendOnLlamaServer:
    def test_real_completion_with_logprobs(self, llama_server):
        backend = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120)
        params = SamplingParams(temperature=0.0, max_tokens=12, top_logprobs=3, seed=1)
        [cand] = asyncio.run(backend.sample(Q, params))
        assert cand.text.strip()
        assert cand.logprobs is not None and len(cand.logprobs) == cand.usage.output_tokens
        assert all(lp.logprob <= 0.0 and math.isfinite(lp.logprob) for lp in cand.logprobs)
        # Greedy decoding picks the most likely token, so it tops its own alternatives.
        first = cand.logprobs[0]
        assert first.top and first.top[0][1] >= first.logprob - 1e-4
        assert cand.usage.input_tokens > 0 and cand.latency_ms > 0
        assert cand.finish_reason in ("stop", "length")

    def test_n_fallback_against_a_server_that_ignores_n(self, llama_server):
        backend = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120)
        params = SamplingParams(temperature=1.0, max_tokens=8, seed=42, logprobs=False)
        cands = asyncio.run(backend.sample(Q, params, k=3))
        assert len(cands) == 3
        assert backend.honours_n is False  # llama.cpp's server answered n=3 with one choice
        assert sorted(c.seed for c in cands if c.seed is not None) == [42, 43, 44]
        assert all(c.text for c in cands)
        assert any("ignored n=3" in note for c in cands for note in c.notes)

    def test_same_seed_same_answer(self, llama_server):
        backend = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120)
        params = SamplingParams(temperature=1.0, max_tokens=8, seed=7, logprobs=False)
        first = backend.sample_sync(Q, params)
        second = backend.sample_sync(Q, params)
        assert first[0].text == second[0].text
        backend.close()

    def test_json_schema_is_served_as_json_object_with_the_schema_and_remembered(self, llama_server):
        # llama.cpp's server answers json_schema with HTTP 500 "Input should be 'text' or 'json_object'".
        registry = CapabilityRegistry()
        backend = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120, capabilities=registry)
        params = SamplingParams(
            temperature=0.2, max_tokens=40, seed=3, logprobs=False, response_format=EXPRESSION_FORMAT
        )
        ask = [{"role": "user", "content": "Write 7 times 8 minus 5 as an arithmetic expression."}]
        [cand] = asyncio.run(backend.sample(ask, params))
        assert backend.capabilities.refused == {"json_schema"}
        value = json.loads(cand.text)
        # The server held the reply to the schema it was given beside json_object: the pattern too.
        assert set(value) == {"expression"} and value["expression"][0] in "0123456789("
        assert any("json_object with the schema" in note for note in cand.notes)
        again = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120, capabilities=registry)
        assert again.capabilities.refused == {"json_schema"}


@needs_llama
class TestDemoOnLlamaServer:
    def test_the_built_in_question_runs_through_the_server_with_one_warning_on_stderr(
        self, llama_server, tmp_path
    ):
        """README's demo through a real llama.cpp server that refuses json_schema: the refusal is one
        warning line on stderr (never in the command's output), and the run ends in a documented code
        with a log that verifies. Which code depends on the server's samples (accept, or an honest
        needs_user when the expressions fail the numbers check)."""
        log = tmp_path / "demo.jsonl"
        args = ["demo", "--base-url", llama_server, "--model-name", "smollm2", "--log", str(log)]
        proc = subprocess.run(
            [str(RETRYCTL), *args],
            cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert proc.returncode in (0, 3, 4), proc.stdout + proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
        if proc.returncode == 0:  # the tour: each built-in question ended in a verdict
            assert "question 1 of 3" in proc.stdout and "question 3 of 3" in proc.stdout
        # The expression members send their grammar (llama.cpp's `grammar` field), which the server
        # honours; only a relaxation to the `expression` rung would send the json_schema it refuses,
        # and then as one warning line on stderr.
        warnings = [line for line in proc.stderr.splitlines() if "capability_refused" in line]
        assert len(warnings) <= 1 and all(w.startswith("warning: ") for w in warnings), proc.stderr
        assert all("feature='json_schema'" in w for w in warnings)
        assert "capability_refused" not in proc.stdout
        records = [json.loads(line) for line in log.read_text().splitlines()]
        grammars = [r.get("candidates_summary", {}).get("grammars") for r in records]
        assert any(g and "permutations" in g for g in grammars), grammars
        assert verify_log(log).ok

    def test_the_demo_answers_through_base_url_with_its_tools_producing_expressions(
        self, llama_server, tmp_path
    ):
        log = tmp_path / "demo.jsonl"
        question = "Tom has 6 bags of 4 apples. He eats 3 apples. How many apples are left?"
        args = ["demo", question, "--base-url", llama_server, "--model-name", "smollm2", "--log", str(log)]
        proc = subprocess.run(
            [str(RETRYCTL), *args],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,  # no TTY: an ask_user verdict ends the run
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        shown = proc.stdout + proc.stderr
        assert proc.returncode in (0, 3, 4), shown  # accepted, stopped, needs the user: all answers
        assert "Input should be" not in shown and "Traceback" not in shown
        records = [json.loads(line) for line in log.read_text().splitlines()]
        verdicts = [r for r in records if r.get("kind") == "verdict"]
        assert verdicts, shown
        # No member failed on the response format (a slow shared host may still time a call out).
        reasons = [r["reason"] for r in verdicts]
        assert not any(w in r for r in reasons for w in ("response_format", "json_schema", "should be")), (
            reasons
        )
        tools = [r for r in verdicts if r["target"] in ("calculator", "python")]
        evaluated = [a for r in tools for a in r["candidates_summary"]["answers"] if a is not None]
        # The model's expression came through the server's JSON mode: a tool evaluated it, or the
        # numbers check read it (and refused it, quoting it) before any tool ran.
        read = [r for r in tools if "numbers_from_question: the expression '" in r["reason"]]
        assert evaluated or read, [r["reason"] for r in verdicts]
        audit = subprocess.run(
            [str(RETRYCTL), "audit", str(log), "--json"], capture_output=True, text=True, check=False
        )
        assert audit.returncode == 0, audit.stdout + audit.stderr
        json.loads(audit.stdout)
