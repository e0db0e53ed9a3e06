"""Token logprobs under a grammar: normalised over the tokens the grammar admits, not the whole vocabulary.

Under a grammar the sampler draws from the admitted tokens only, so a token the grammar forces (the only
digit the question allows there) was certain, whatever the model's unconstrained logits say of it. Read
against the whole vocabulary, such tokens look unlikely and drag a candidate's token confidence and its
weakest span down for reasons that are the grammar's, not the model's doubt. This mirror of the
sampler's grammar (a second llama.cpp grammar sampler fed the same accepted tokens) asks which of the
most likely tokens are admitted at each step and renormalises over those.

Only the ``CONSIDERED`` most likely tokens (and the chosen one) are put to the grammar: applying it to
the whole vocabulary costs a few milliseconds a token, and an admitted token outside the top few hundred
carries a negligible share of the mass, so the figure is at most that share too high. llama.cpp has no
call for "the admitted set" and llama-cpp-python none for logprobs under a grammar, hence by hand.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from retryctl.models._logprobs import logprob_of

__all__ = ["CONSIDERED", "AdmittedLogprobs", "TokenScorer", "WholeVocabulary"]

CONSIDERED = 256
"""How many of the most likely tokens are put to the grammar at each step (see the module doc)."""


class AdmittedLogprobs:
    """Logprobs renormalised over the grammar's admitted tokens, step by step along one decoding run.

    ``lib`` is the ``llama_cpp`` module, ``vocab`` the model's vocabulary pointer, ``gbnf``/``root`` the
    grammar as the sampler got it. Call :meth:`logprob_of` for each drawn token, in order; it also
    advances the mirror past that token. :meth:`close` frees the mirror (it is not in any chain).
    """

    def __init__(self, lib: Any, vocab: Any, gbnf: str, root: str) -> None:
        self._lib = lib
        self._sampler = lib.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), root.encode("utf-8"))
        if not self._sampler:
            raise ValueError("llama.cpp refused the grammar for the admitted-token mirror")
        self._data = (lib.llama_token_data * (CONSIDERED + 1))()
        self._view = np.ctypeslib.as_array(self._data)  # fields id, logit, p over the same memory
        self._array = lib.llama_token_data_array(self._data, 0, -1, False)

    def logprob_of(
        self, logits: npt.NDArray[np.float32], token: int, top: int = 0
    ) -> tuple[float, list[tuple[int, float]]]:
        """``token``'s logprob among the admitted tokens, and the ``top`` most likely admitted ones."""
        considered = min(CONSIDERED, logits.shape[0])
        ids = np.argpartition(logits, -considered)[-considered:]
        if token not in ids:
            ids = np.append(ids, token)
        n = len(ids)
        view = self._view[:n]
        view["id"], view["logit"], view["p"] = ids, logits[ids], 0.0
        self._array.size, self._array.selected, self._array.sorted = n, -1, False
        self._lib.llama_sampler_apply(self._sampler, self._array)
        # The grammar sampler marks refused tokens -inf in place (it may also reorder nothing else).
        kept = self._view[: self._array.size]
        pairs = zip(kept["id"], kept["logit"], strict=True)
        admitted = {int(i): float(v) for i, v in pairs if math.isfinite(v)}
        self._lib.llama_sampler_accept(self._sampler, token)
        # The drawn token was admitted by the sampler's own grammar; if the mirror disagrees (it cannot,
        # fed the same tokens), fall back to the token alone rather than report a logprob of -inf.
        admitted.setdefault(token, float(logits[token]))
        peak = max(admitted.values())
        log_norm = peak + math.log(sum(math.exp(v - peak) for v in admitted.values()))
        chosen = admitted[token] - log_norm
        if top <= 0:
            return chosen, []
        best = sorted(admitted.items(), key=lambda kv: kv[1], reverse=True)[:top]
        return chosen, [(i, v - log_norm) for i, v in best]

    def close(self) -> None:
        """Free the mirror sampler; safe to call twice."""
        if self._sampler:
            self._lib.llama_sampler_free(self._sampler)
            self._sampler = None


class WholeVocabulary:
    """Logprobs over the whole vocabulary (no grammar): :func:`~._logprobs.logprob_of`, nothing to free."""

    def logprob_of(
        self, logits: npt.NDArray[np.float32], token: int, top: int = 0
    ) -> tuple[float, list[tuple[int, float]]]:
        """``log softmax(logits)[token]`` and the ``top`` most likely tokens."""
        return logprob_of(logits, token, top)

    def close(self) -> None:
        """Nothing to free."""


class TokenScorer:
    """Each drawn token's logprob, read from the context's last logits, for one decoding run: over the
    admitted tokens of ``grammar`` (a ``LlamaGrammar``), or over the whole vocabulary when it is ``None``.
    """

    def __init__(self, lib: Any, ctx: Any, vocab: Any, n_vocab: int, grammar: Any) -> None:
        self._lib, self._ctx, self._n_vocab = lib, ctx, n_vocab
        self._way: AdmittedLogprobs | WholeVocabulary = (
            WholeVocabulary()
            if grammar is None
            else AdmittedLogprobs(lib, vocab, grammar._grammar, grammar._root)
        )

    def score(self, token: int, top: int = 0) -> tuple[float, list[tuple[int, float]]]:
        """``token``'s logprob and the ``top`` most likely alternatives, at the current position."""
        logits = np.ctypeslib.as_array(self._lib.llama_get_logits_ith(self._ctx, -1), shape=(self._n_vocab,))
        return self._way.logprob_of(logits, token, top)

    def close(self) -> None:
        """Free what the run held."""
        self._way.close()
