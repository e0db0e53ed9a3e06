"""TextEmitter: what a streamed decode hands on is final (no part of a stop string, whole characters)."""

from __future__ import annotations

from retryctl.models._text_sink import TextEmitter


def _fed(pieces: list[bytes], *, holdback: int, stop: bytes | None = None) -> list[str]:
    """Feed the buffer growing by ``pieces`` as the decoder does: when a piece completes ``stop``, the
    buffer is cut where ``stop`` begins and only the final feed follows."""
    sent: list[str] = []

    def sink(_index: int, text: str) -> bool:
        sent.append(text)
        return True

    emitter = TextEmitter(sink, 0, holdback=holdback)
    buf = bytearray()
    for piece in pieces:
        buf += piece
        if stop is not None and (at := buf.find(stop)) != -1:
            del buf[at:]
            break
        emitter.feed(buf)
    emitter.feed(buf, final=True)
    return sent


class TestTextEmitter:
    def test_without_stop_strings_each_piece_goes_out_as_it_comes(self) -> None:
        assert _fed([b"The", b" cat", b" sat"], holdback=0) == ["The", " cat", " sat"]

    def test_what_may_begin_a_stop_string_is_held_and_the_stop_string_never_sent(self) -> None:
        # stop="END" (3 bytes): the last 2 bytes wait until they cannot begin it.
        sent = _fed([b"one", b" two", b" E", b"N", b"D", b" more"], holdback=2, stop=b"END")
        assert "".join(sent) == "one two "
        assert len(sent) > 1 and not any("E" in s for s in sent)

    def test_a_character_split_over_tokens_goes_out_whole(self) -> None:
        euro = "€".encode()
        sent = _fed([b"a", euro[:1], euro[1:2], euro[2:], b"b"], holdback=0)
        assert "".join(sent) == "a€b" and all("\ufffd" not in s for s in sent)

    def test_a_sink_that_says_stop_gets_nothing_more(self) -> None:
        sent: list[str] = []

        def sink(_index: int, text: str) -> bool:
            sent.append(text)
            return len(sent) < 2

        emitter = TextEmitter(sink, 0, holdback=0)
        buf = bytearray()
        wanted = []
        for piece in (b"a", b"b", b"c"):
            buf += piece
            wanted.append(emitter.feed(buf))
        assert wanted == [True, False, False] and sent == ["a", "b"]
