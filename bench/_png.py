"""An 8-bit RGB/RGBA PNG, what headless Chromium writes, decoded by the PNG spec: the screenshot script
trims its pictures with it and the tests read their pixels back with it. Written by hand because no
package the project keeps reads a PNG (Pillow would be a dependency for this alone)."""

from __future__ import annotations

import struct
import zlib

__all__ = ["decode"]

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def decode(data: bytes) -> tuple[int, int, int, list[bytearray]]:
    """``(width, channels, height, rows)``: the unfiltered rows of pixels of an 8-bit RGB or RGBA PNG."""
    if data[:8] != SIGNATURE:
        raise ValueError("not a PNG")
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            if depth != 8 or colour not in (2, 6):
                raise ValueError(f"unexpected PNG from chromium: depth {depth}, colour type {colour}")
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        filt, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if filt == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 255
        elif filt == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev, strict=True))
        elif filt in (3, 4):
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b, c = prev[i], (prev[i - channels] if i >= channels else 0)
                if filt == 3:
                    line[i] = (line[i] + (a + b) // 2) & 255
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, channels, height, rows
