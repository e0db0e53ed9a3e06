"""Whether llama.cpp's own grammar sampler lets the model write a string: GBNF acceptance without a
reimplementation of GBNF.

The string's tokens go one by one through ``llama_sampler_apply`` as a one-token candidate list (a
logit set to -inf means the grammar refuses it), each allowed token is then accepted, and at the end
the end-of-generation token must be allowed: exactly what decoding under the grammar would permit.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any


class GbnfOracle:
    """Acceptance of strings under GBNF grammars, on the embedded model's vocabulary (weights unloaded)."""

    def __init__(self, model_path: str) -> None:
        import llama_cpp

        self._lib: Any = llama_cpp
        self._llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
        self._vocab = self._llm._model.vocab
        self._eos = llama_cpp.llama_vocab_eos(self._vocab)

    def close(self) -> None:
        """Free the vocabulary."""
        self._llm.close()

    def _allowed(self, sampler: Any, token: int) -> bool:
        lib = self._lib
        data = (lib.llama_token_data * 1)(lib.llama_token_data(token, 0.0, 0.0))
        array = lib.llama_token_data_array(data, 1, -1, False)
        lib.llama_sampler_apply(sampler, ctypes.byref(array))
        return not math.isinf(data[0].logit)

    def accepts(self, gbnf: str, text: str) -> bool:
        """Whether decoding under ``gbnf`` can write exactly ``text`` (in the model's tokenisation)
        and stop there. ``ValueError`` when llama.cpp cannot parse the grammar."""
        lib = self._lib
        sampler = lib.llama_sampler_init_grammar(self._vocab, gbnf.encode("utf-8"), b"root")
        if not sampler:
            raise ValueError("llama.cpp could not parse the grammar")
        try:
            for token in self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False):
                if not self._allowed(sampler, token):
                    return False  # accepting a refused token would abort llama.cpp: stop here
                lib.llama_sampler_accept(sampler, token)
            return self._allowed(sampler, self._eos)
        finally:
            lib.llama_sampler_free(sampler)
