"""Finding record batches again after damage, in time linear in the size of the file.

After a stretch that is not a batch, every byte position could be where the next batch starts. Taking
each candidate's declared length on trust and checksumming that many bytes costs the length at every
candidate: a file of a repeated three-byte pattern took 30 s to read at 4 MiB. Here a candidate must first
pass what a batch's header always satisfies, checked by a regular expression over the whole buffer (magic
2, attributes with no unknown bit and a known codec, a length within ``kraftlake.decode.batch.max.bytes``)
and then in Python (a record count that the length can hold, a lastOffsetDelta that covers it). Only then
is its CRC-32C computed, and not from its bytes: from running checksums of the buffer taken every
``STEP`` bytes, each byte read once however many candidates overlap it, and combined with the algebra of
CRCs (the checksum of a stretch is the running checksum at its end less the one at its start, shifted by
its length). A candidate then costs a few kilobytes of checksumming, never its length.
"""

from __future__ import annotations

import mmap
import re
from array import array
from functools import lru_cache

import crc32c

from kraftlake.codec.batches import CRC_START, HEADER, HEADER_SIZE, LOG_OVERHEAD
from kraftlake.codec.bounds import Limits

STEP = 4096  # bytes between two running checksums
_ZEROS = memoryview(bytes(STEP))
_POLY = 0x82F63B78  # CRC-32C's polynomial, bit-reversed as the checksum is computed
_ONE = 1 << 31  # the polynomial 1 in that bit order
_MIN_RECORD = 7  # length, attributes, timestamp and offset deltas, key and value lengths, header count
_MIN_LENGTH = HEADER_SIZE - LOG_OVERHEAD


def _multiply(a: int, b: int) -> int:
    """a times b modulo CRC-32C's polynomial, both in the checksum's bit-reversed order."""
    product = 0
    bit = _ONE
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
        bit >>= 1
    return product


def _after_zeros(value: int, count: int) -> int:
    """The CRC register ``value`` after ``count`` <= STEP zero bytes (the library applies the checksum's
    pre- and post-conditioning, which the second term takes out again)."""
    return crc32c.crc32c(_ZEROS[:count], value=value) ^ crc32c.crc32c(_ZEROS[:count], value=0)


@lru_cache(maxsize=None)
def _shift_table(digit: int, place: int) -> tuple[int, ...]:
    """Moving a register past ``digit * 16**place`` steps of zeros, as four tables of 256 (one per byte of
    the register: the move is linear), so that a move costs four lookups, not a polynomial product. At
    most 15 digits x 8 places of them, built when first needed."""
    steps, factor, power = digit * 16 ** place, _ONE, _after_zeros(_ONE, STEP)
    while steps:
        if steps & 1:
            factor = _multiply(factor, power)
        power, steps = _multiply(power, power), steps >> 1
    bits = [_multiply(factor, 1 << i) for i in range(32)]
    table = [0] * 1024
    for byte in range(4):
        for value in range(1, 256):
            low = value & -value
            table[byte * 256 + value] = table[byte * 256 + (value ^ low)] ^ bits[byte * 8 + low.bit_length() - 1]
    return tuple(table)


def _shift(value: int, count: int) -> int:
    """``value`` moved past ``count`` zero bytes: what a running checksum at a stretch's start contributes
    to the one at its end."""
    steps, rest = divmod(count, STEP)
    place = 0
    while steps:
        if steps & 15:
            t = _shift_table(steps & 15, place)
            value = t[value & 255] ^ t[256 + (value >> 8 & 255)] ^ t[512 + (value >> 16 & 255)] ^ t[768 + (value >> 24)]
        steps >>= 4
        place += 1
    return _after_zeros(value, rest)


@lru_cache(maxsize=8)
def _candidates(batch_bytes: int) -> re.Pattern:
    """Positions whose header bytes could start a batch: batchLength's top byte small enough, magic 2,
    attributes with bits 7..15 clear and a codec of 0..4."""
    top = re.escape(bytes([min(batch_bytes >> 24, 0x7F)]))
    attributes = b"".join(re.escape(bytes([v])) for v in range(0x80) if v & 0x07 <= 4)
    return re.compile(b"(?=.{8}[\\x00-" + top + b"].{7}\\x02.{4}\\x00[" + attributes + b"])", re.DOTALL)


class Scanner:
    """One buffer's batches checked and found again after damage; see the module's doc."""

    def __init__(self, buf: bytes | memoryview | mmap.mmap, limits: Limits):
        self.buf = buf
        self.view = memoryview(buf)
        self.size = len(buf)
        self.limits = limits
        self.anchor: int | None = None
        self.marks = array("L")  # CRC-32C of buf[anchor:anchor + k * STEP], k = 0, 1, ...

    def __enter__(self) -> Scanner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.view.release()  # a memory map cannot be closed while a view of it exists

    def crc(self, start: int, end: int) -> int:
        """CRC-32C of ``buf[start:end]``."""
        if end - start <= 2 * STEP:
            return crc32c.crc32c(self.view[start:end])
        at_start = self._running(start)
        return self._running(end) ^ _shift(at_start, end - start)

    def _running(self, position: int) -> int:
        """CRC-32C of ``buf[anchor:position]``, the anchor being the first position asked about (callers
        move forward through the buffer)."""
        if self.anchor is None or position < self.anchor:
            self.anchor, self.marks = position, array("L", [0])
        steps, _ = divmod(position - self.anchor, STEP)
        while len(self.marks) <= steps:
            start = self.anchor + (len(self.marks) - 1) * STEP
            self.marks.append(crc32c.crc32c(self.view[start:start + STEP], value=self.marks[-1]))
        base = self.anchor + steps * STEP
        return crc32c.crc32c(self.view[base:position], value=self.marks[steps])

    def intact(self, pos: int) -> bool:
        """Whether a whole batch starts at ``pos``: its header plausible and its CRC right."""
        if pos + HEADER_SIZE > self.size:
            return False
        (_, length, _, magic, crc, attributes, last_delta, _, _, _, _, _, count) = HEADER.unpack_from(self.buf, pos)
        end = pos + LOG_OVERHEAD + length
        if magic != 2 or attributes & ~0x7F or attributes & 0x07 > 4:
            return False
        if not _MIN_LENGTH <= length <= self.limits.batch_bytes or end > self.size:
            return False
        if count < 0 or last_delta < max(count - 1, 0):
            return False
        if attributes & 0x07 == 0 and count * _MIN_RECORD > length - _MIN_LENGTH:
            return False
        return self.crc(pos + CRC_START, end) == crc

    def next_intact(self, start: int) -> int | None:
        """The position of the first whole batch at or after ``start``, if any."""
        for match in _candidates(self.limits.batch_bytes).finditer(self.buf, start):
            if self.intact(match.start()):
                return match.start()
        return None

