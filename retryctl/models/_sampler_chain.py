"""How the embedded backend asks llama.cpp for a token: the sampling knobs, and where a stop string ends
a decode.

llama-cpp-python's ``Llama.generate`` builds llama.cpp's sampler chain from the knobs in a fixed order:
top-k, then top-p over what top-k kept (renormalised), then min-p, then the temperature, then the
draw; temperature 0 is greedy (docs/models.md, "Sampling knob order"; tests/models/test_sampler_chain.py
shows the candidate set the order implies).
"""

from __future__ import annotations

from typing import Any

from retryctl.models._types import SamplingParams

__all__ = ["sampler_knobs", "stop_at"]

# llama-cpp-python's own defaults, used where SamplingParams leaves a knob at None.
_DEFAULT_TOP_K, _DEFAULT_TOP_P, _DEFAULT_MIN_P = 40, 0.95, 0.05


def sampler_knobs(params: SamplingParams) -> dict[str, Any]:
    """The sampling knobs handed to ``Llama.generate``, which builds llama.cpp's chain from them in its
    fixed order: top-k, then top-p over what top-k kept (renormalised), then min-p, then the
    temperature, then the draw (docs/models.md, "Sampling knob order"). A ``None`` knob takes
    llama-cpp-python's default."""
    return {
        "top_k": params.top_k if params.top_k is not None else _DEFAULT_TOP_K,
        "top_p": params.top_p if params.top_p is not None else _DEFAULT_TOP_P,
        "min_p": params.min_p if params.min_p is not None else _DEFAULT_MIN_P,
        "temp": params.temperature,
    }


def stop_at(buf: bytearray, stops: list[bytes], kept: set[bytes], last: int) -> int:
    """Where ``buf`` ends at its first stop string that the piece from byte ``last`` on completes (after
    it when the string is ``kept``, before it otherwise), or -1."""
    window = max(0, last - max(len(s) for s in stops))
    found = min(((i, s) for s in stops if (i := buf.find(s, window)) != -1), default=None)
    if found is None:
        return -1
    return found[0] + len(found[1]) if found[1] in kept else found[0]
