"""Token logprobs from raw logits: one log-softmax over the vocabulary, in numpy.

llama-cpp-python's own logprobs need ``logits_all=True``, which copies every position's logits and makes
decoding slow; reading the last position's logits after each eval and normalising them here costs a few
per cent of a token's time instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["TokenScorer", "logprob_of", "scored"]


def logprob_of(
    logits: npt.NDArray[np.float32], token: int, top: int = 0
) -> tuple[float, list[tuple[int, float]]]:
    """``log softmax(logits)[token]`` and the ``top`` most likely token ids with their logprobs.

    Computed as ``logits - logsumexp(logits)`` with the maximum subtracted first, so large logits do not
    overflow; only the entries asked for are normalised.
    """
    chosen, alternatives, _ = scored(logits, token, top)
    return chosen, alternatives


def scored(
    logits: npt.NDArray[np.float32], token: int, top: int = 0
) -> tuple[float, list[tuple[int, float]], float]:
    """:func:`logprob_of` and the entropy (nats) of the whole distribution at this position.

    The entropy reuses the softmax's exponentials: ``H = log Z - sum(e * (l - peak)) / Z`` with
    ``e = exp(l - peak)`` and ``Z = sum(e)``, one dot product more (about 16 µs on a 49k vocabulary, a
    fraction of a per cent of a token's time).
    """
    peak = float(logits.max())
    shifted = logits - peak
    exps = np.exp(shifted, dtype=np.float32)
    total = float(exps.sum(dtype=np.float64))
    log_z = float(np.log(total))
    log_norm = peak + log_z
    entropy = max(0.0, log_z - float(np.dot(exps, shifted)) / total)
    chosen = float(logits[token]) - log_norm
    if top <= 0:
        return chosen, [], entropy
    ids = np.argpartition(logits, -top)[-top:]
    ids = ids[np.argsort(logits[ids])[::-1]]
    return chosen, [(int(i), float(logits[i]) - log_norm) for i in ids], entropy


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

    def score(self, token: int, top: int = 0) -> tuple[float, list[tuple[int, float]], float | None]:
        """``token``'s logprob, the ``top`` most likely alternatives and the entropy of the whole
        distribution (nats), at the current position (a scorer that cannot tell the entropy: ``None``)."""
        return scored(self.logits(), token, top)

    def close(self) -> None:
        """Nothing to free here; a scorer that holds native state frees it."""
