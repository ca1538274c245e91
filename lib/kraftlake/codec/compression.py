"""Decompression that stops at a limit: a few compressed bytes can stand for gigabytes (a zstd frame of
run-length blocks grows 30,000-fold), so no codec is asked for its whole output at once.

Each codec is bounded the cheapest way it allows: zlib, bzip2 and xz stream with a cap on the output of
each step (and xz's window, which its stream declares, with a cap on the decoder's memory); a raw snappy block declares its length, checked before anything is allocated; zstd and lz4
frames (cramjam) are decompressed into a buffer of a fixed size, grown by doubling up to the limit, the
decoder stopping when the buffer is full. A stream that would exceed its limit raises ``TooLarge``, having
held at most about twice the limit; any other failure is the codec's own error.
"""

from __future__ import annotations

import bz2
import lzma
import struct
import zlib
from typing import Callable

import cramjam

from kraftlake.codec.bounds import TooLarge

GZIP_WBITS = 31  # a gzip member (header and trailer)
RAW_DEFLATE_WBITS = -15  # a deflate stream without zlib's header (Avro's "deflate")
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = 16  # magic, version, compatible version
_FULL = "failed to write whole buffer"  # cramjam's DecompressionError when the output buffer is full
_FIRST_GUESS = 1 << 16
# xz's decoder holds the window its stream declares (up to 1.5 GiB); xz -9 needs 65 MiB, fastavro's default 9
XZ_MEMORY_LIMIT = 1 << 27


def _too_large(limit: int) -> TooLarge:
    return TooLarge(f"decompresses to more than its limit of {limit:,} bytes")


def inflate(data: bytes, wbits: int, limit: int) -> bytes:
    """A deflate stream (``wbits`` as zlib takes it); gzip members one after another, as gzip reads them."""
    out = bytearray()
    rest = data
    while True:
        stream = zlib.decompressobj(wbits)
        while not stream.eof:
            chunk = stream.decompress(rest, limit + 1 - len(out))
            out += chunk
            if len(out) > limit:
                raise _too_large(limit)
            rest = stream.unconsumed_tail
            if not chunk and not rest:
                raise zlib.error("the compressed stream ends before its end marker")
        rest = stream.unused_data
        if not rest or wbits != GZIP_WBITS:
            return bytes(out)


def _stepwise(decompressor: bz2.BZ2Decompressor | lzma.LZMADecompressor, data: bytes, limit: int) -> bytes:
    out = bytearray(decompressor.decompress(data, limit + 1))
    while len(out) <= limit and not decompressor.eof and not decompressor.needs_input:
        out += decompressor.decompress(b"", limit + 1 - len(out))
    if len(out) > limit:
        raise _too_large(limit)
    if not decompressor.eof:
        raise EOFError("the compressed stream ends before its end marker")
    return bytes(out)


def bunzip2(data: bytes, limit: int) -> bytes:
    return _stepwise(bz2.BZ2Decompressor(), data, limit)


def unxz(data: bytes, limit: int) -> bytes:
    return _stepwise(lzma.LZMADecompressor(memlimit=XZ_MEMORY_LIMIT), data, limit)


def snappy_raw(block: bytes, limit: int) -> bytes:
    """One raw snappy block, whose header declares its decompressed length."""
    if cramjam.snappy.decompress_raw_len(block) > limit:
        raise _too_large(limit)
    return bytes(cramjam.snappy.decompress_raw(block))


def snappy(data: bytes, limit: int) -> bytes:
    """Kafka's snappy: xerial's framing as the Java client writes it ([int32 length][raw block]... after a
    16-byte header), or one raw block."""
    if not data.startswith(XERIAL_MAGIC):
        return snappy_raw(data, limit)
    out = bytearray()
    pos = XERIAL_HEADER
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise ValueError(f"xerial block of {size} bytes at byte {pos - 4} runs past the payload's end")
        out += snappy_raw(data[pos:pos + size], limit - len(out))
        pos += size
    return bytes(out)


def _into(decompress_into: Callable[[bytes, bytearray], int], data: bytes, limit: int) -> bytes:
    size = min(limit, max(4 * len(data), _FIRST_GUESS))
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _FULL not in str(exc):
                raise
            if size >= limit:
                raise _too_large(limit) from None
            size = min(limit, 2 * size)
            continue
        del out[written:]
        return bytes(out)


def zstd(data: bytes, limit: int) -> bytes:
    return _into(cramjam.zstd.decompress_into, data, limit)


def lz4_frame(data: bytes, limit: int) -> bytes:
    return _into(cramjam.lz4.decompress_into, data, limit)


ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, cramjam.DecompressionError, struct.error, ValueError)
