from __future__ import annotations

import importlib
import math
from typing import Any

import pytest

from tests.models.conftest import needs_llama


@needs_llama  # numpy arrives with llama-cpp-python (the 'local' extra)
class TestLogprobOf:
    def test_matches_the_definition(self):
        from retryctl.models._logprobs import logprob_of

        np: Any = importlib.import_module("numpy")
        logits = np.array([1.0, 2.0, 3.0, 0.5], dtype=np.float32)
        norm = math.log(sum(math.exp(x) for x in (1.0, 2.0, 3.0, 0.5)))
        lp, top = logprob_of(logits, 1, top=2)
        assert lp == pytest.approx(2.0 - norm, abs=1e-6)
        assert [i for i, _ in top] == [2, 1]
        assert top[0][1] == pytest.approx(3.0 - norm, abs=1e-6)

    def test_large_logits_do_not_overflow(self):
        from retryctl.models._logprobs import logprob_of

        np: Any = importlib.import_module("numpy")
        lp, top = logprob_of(np.array([1000.0, 1000.0], dtype=np.float32), 0)
        assert lp == pytest.approx(-math.log(2), abs=1e-6) and top == []
