from __future__ import annotations

import asyncio
import math

import pytest

from retryctl.exceptions import ConfigError
from retryctl.models import (
    Candidate,
    ReplayExhausted,
    SamplingParams,
    ScriptedBackend,
    TransientBackendError,
)


class TestScriptedBackend:
    def test_serves_items_in_order_and_records_calls(self):
        backend = ScriptedBackend(["41", "42", "42"])
        cands = backend.sample_sync([{"role": "user", "content": "q"}], SamplingParams(seed=3), k=3)
        assert [c.text for c in cands] == ["41", "42", "42"]
        assert [c.seed for c in cands] == [3, 4, 5]
        assert backend.calls[0].k == 3 and backend.calls[0].messages[0]["content"] == "q"
        with pytest.raises(ReplayExhausted):
            backend.sample_sync([{"role": "user", "content": "q"}])

    def test_confidence_sets_token_logprobs_exactly(self):
        backend = ScriptedBackend(["the answer is 4"], confidence=0.8)
        [cand] = asyncio.run(backend.sample([{"role": "user", "content": "q"}]))
        assert cand.token_logprobs is not None and len(cand.token_logprobs) == 4
        assert math.exp(sum(cand.token_logprobs) / 4) == pytest.approx(0.8)

    def test_errors_candidates_and_callables(self):
        err = TransientBackendError("503", backend="x", status_code=503)
        ready = Candidate(text="made", model="elsewhere")
        backend = ScriptedBackend([err, ready, lambda msgs, params: msgs[-1]["content"].upper()])
        with pytest.raises(TransientBackendError):
            backend.sample_sync([{"role": "user", "content": "q"}])
        cands = backend.sample_sync([{"role": "user", "content": "echo"}], k=2)
        assert [c.text for c in cands] == ["made", "ECHO"] and cands[0].model == "elsewhere"

    def test_cycle(self):
        backend = ScriptedBackend(["a", "b"], cycle=True)
        assert [c.text for c in backend.sample_sync([{"role": "user", "content": "q"}], k=5)] == list("ababa")
        with pytest.raises(ConfigError, match="script"):
            ScriptedBackend([], cycle=True)
        with pytest.raises(ConfigError, match="confidence"):
            ScriptedBackend(["a"], confidence=0.0)
