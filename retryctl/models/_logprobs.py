"""Token logprobs from raw logits: one log-softmax over the vocabulary, in numpy.

llama-cpp-python's own logprobs need ``logits_all=True``, which copies every position's logits and makes
decoding slow; reading the last position's logits after each eval and normalising them here costs a few
per cent of a token's time instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["TokenScorer", "logprob_of"]


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


class TokenScorer:
    """Each drawn token's logprob over the whole vocabulary, read from the context's last logits.

    Under a grammar too: a token the grammar forces still reads as unlikely when the model would not
    have written it, and that is evidence. Renormalised over the grammar's admitted tokens instead, the
    demo agent accepted more wrong answers (docs/models.md, ``bench/grammar_confidence.py``).
    """

    def __init__(self, lib: Any, ctx: Any, n_vocab: int) -> None:
        self._lib, self._ctx, self._n_vocab = lib, ctx, n_vocab

    def logits(self) -> npt.NDArray[np.float32]:
        """The last position's logits, a view on the context's memory (valid until the next eval)."""
        pointer = self._lib.llama_get_logits_ith(self._ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))

    def score(self, token: int, top: int = 0) -> tuple[float, list[tuple[int, float]]]:
        """``token``'s logprob and the ``top`` most likely alternatives, at the current position."""
        return logprob_of(self.logits(), token, top)

    def close(self) -> None:
        """Nothing to free here; a scorer that holds native state frees it."""
