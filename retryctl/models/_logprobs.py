"""Token logprobs from raw logits: one log-softmax over the vocabulary, in numpy.

llama-cpp-python's own logprobs need ``logits_all=True``, which copies every position's logits and makes
decoding slow; reading the last position's logits after each eval and normalising them here costs a few
per cent of a token's time instead.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["logprob_of"]


def logprob_of(
    logits: npt.NDArray[np.float32], token: int, top: int = 0
) -> tuple[float, list[tuple[int, float]]]:
    """``log softmax(logits)[token]`` and the ``top`` most likely token ids with their logprobs.

    Computed as ``logits - logsumexp(logits)`` with the maximum subtracted first, so large logits do not
    overflow; only the entries asked for are normalised.
    """
    peak = float(logits.max())
    log_norm = peak + float(np.log(np.exp(logits - peak, dtype=np.float32).sum(dtype=np.float64)))
    chosen = float(logits[token]) - log_norm
    if top <= 0:
        return chosen, []
    ids = np.argpartition(logits, -top)[-top:]
    ids = ids[np.argsort(logits[ids])[::-1]]
    return chosen, [(int(i), float(logits[i]) - log_norm) for i in ids]
