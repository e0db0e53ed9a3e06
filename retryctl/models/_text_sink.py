"""Text handed on while a candidate is decoded (the gateway's token-by-token stream).

Only what is final goes out: bytes that may still become the start of a stop string are held back
(the stop string is cut from the text, so it must never have been sent), and a multi-byte character
goes out once it is whole.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable

__all__ = ["TextEmitter", "TextSink"]

TextSink = Callable[[int, str], bool]
"""Called with a candidate's index and its next piece of text; returning ``False`` asks the decoder
to stop (the caller went away)."""


class TextEmitter:
    """Hands the final part of a growing decode buffer to a :data:`TextSink`, piece by piece."""

    def __init__(self, sink: TextSink, index: int, *, holdback: int) -> None:
        self._sink = sink
        self._index = index
        self._holdback = max(0, holdback)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._sent = 0
        self.wanted = True
        """``False`` once the sink asked to stop."""

    def feed(self, buf: bytes | bytearray, *, final: bool = False) -> bool:
        """Send what of ``buf`` can no longer change (all of it when ``final``); ``False``: stop."""
        end = len(buf) if final else len(buf) - self._holdback
        if end > self._sent:
            text = self._decoder.decode(bytes(buf[self._sent : end]), final=final)
            self._sent = end
            if text and self.wanted:
                self.wanted = self._sink(self._index, text)
        elif final:
            text = self._decoder.decode(b"", final=True)
            if text and self.wanted:
                self.wanted = self._sink(self._index, text)
        return self.wanted
