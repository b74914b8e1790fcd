"""Byte-level edits of update frames for the station's fuzz test and bench
(docs/wire_format.md): read and write a little-endian field, recompute the CRC32, swap a
plain frame's metadata."""

from __future__ import annotations

import struct
import zlib

_U32 = struct.Struct('<I')


def crc_fixed(frame: bytes | bytearray) -> bytes:
    """The frame with its trailing CRC32 recomputed over every byte before it."""
    body = bytes(frame[:-4])
    return body + _U32.pack(zlib.crc32(body))


def get(buf: bytes | bytearray, offset: int, width: int) -> int:
    """The little-endian field of ``width`` bytes at ``offset``."""
    return int.from_bytes(buf[offset:offset + width], 'little')


def put(buf: bytearray, offset: int, width: int, value: int) -> None:
    """Write ``value`` as the little-endian field of ``width`` bytes at ``offset``."""
    buf[offset:offset + width] = value.to_bytes(width, 'little')


def with_metadata(inner: bytes, blob: bytes) -> bytes:
    """The plain v1 or v2 frame with its metadata replaced by ``blob`` (lengths fixed, CRC
    not)."""
    if inner[4] == 1:
        start = 40 + get(inner, 24, 4)
        b = bytearray(inner[:start] + blob + inner[start + get(inner, 28, 4):])
        put(b, 28, 4, len(blob))
        return bytes(b)
    old = get(inner, 26, 4)
    b = bytearray(inner[:26] + _U32.pack(len(blob)) + blob + inner[30 + old:])
    put(b, 22, 4, get(inner, 22, 4) + len(blob) - old)
    return bytes(b)
