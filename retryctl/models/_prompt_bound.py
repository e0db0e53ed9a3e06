"""An upper bound on a prompt's tokens without its tokenizer, for the reservation made before a call.

A ledger charges a call at most what it reserved (so no total passes a limit) and keeps the rest as
``overrun``, so a reservation that falls short lets a token budget leak. Without the model's
tokenizer (a server's model is only a name here), the bound is built from what chat models'
tokenizers and templates share:

- text: ASCII letters at most one token per two (words are whole tokens or a few pieces); every
  other character one token per UTF-8 byte, the most a byte-level tokenizer takes. Digits are split
  one a token by Llama-family, SmolLM and Qwen tokenizers, a space between numbers is a token of its
  own, and a CJK character or an emoji may take two or three;
- each message: its role markers and separators (ChatML's ``<|im_start|>user\n ... <|im_end|>\n``
  is 5 tokens; the bound allows 8);
- each request: what the template adds by itself, its generation prompt and a default system prompt
  when none is given. SmolLM2's is 28 tokens, so the embedded model counts ``hi`` as 31 tokens.

It over-reserves English prose about twice over (a spent reservation is given back when the call
ends, so this only matters near a limit). It is not a bound for random letters (hashes, base64),
which a tokenizer may take a token per letter or two: there the ledger keeps the excess as
``overrun``. ``tests/models/test_prompt_bound.py`` checks it against the embedded model.
"""

from __future__ import annotations

__all__ = ["PER_MESSAGE_TOKENS", "TEMPLATE_TOKENS", "prompt_tokens_bound"]

PER_MESSAGE_TOKENS = 8
"""A message's role markers and separators."""
TEMPLATE_TOKENS = 48
"""What a chat template adds to a request beyond its messages (see the module docstring)."""


def prompt_tokens_bound(texts: list[str]) -> int:
    """An upper bound on the tokens of a prompt of these messages' texts (see the module docstring)."""
    total = 0
    for text in texts:
        letters = sum(ch.isascii() and ch.isalpha() for ch in text)
        others = len(text.encode("utf-8", "surrogatepass")) - letters
        total += (letters + 1) // 2 + others + PER_MESSAGE_TOKENS
    return total + TEMPLATE_TOKENS
