"""The straight-line message readers (one generated function per message and version) against the
interpreter they stand in for: the same values for what it accepts, a refusal for exactly what it refuses,
and its error texts for those (``decode_message`` asks it again)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from kraftlake.codec import batches, messages
from kraftlake.codec.batches import BadRecord, records
from kraftlake.codec.logdir import file_batches
from kraftlake.codec.messages import (MessageError, Reader, decode_message, encode_message, message_decoder,
                                      write_varint)
from kraftlake.metadata.schemas import INT_RANGES, FieldSpec, MessageSpec, registry

FIXTURES = ("single-broker-shutdown", "single-broker-snapshot", "single-broker-restarts", "three-brokers-restarts")
MUTATIONS = 12


def interpreted(spec: MessageSpec, version: int, buf: bytes) -> dict | None:
    """The interpreter's reading of a whole message; None where it raises."""
    reader = Reader(buf)
    try:
        data = message_decoder(spec, version)(reader)
    except (ValueError, IndexError, struct.error):
        return None
    return None if reader.remaining() else data


def straight_line(spec: MessageSpec, version: int, buf: bytes) -> dict | None:
    """The generated reader's; None where it refuses."""
    try:
        return messages._compiled_for(messages._straight_line_decoder, spec, version)(buf)
    except messages.NOT_READ:
        return None


def every_version() -> list[tuple[MessageSpec, int]]:
    """Each message of the registry at each version it defines (up to three of an open range)."""
    out = []
    for spec in {id(s): s for s in registry().by_name.values()}.values():
        high = spec.valid_versions.high
        for version in range(spec.valid_versions.low, (spec.valid_versions.low + 2 if high is None else high) + 1):
            out.append((spec, version))
    return out


def some_value(rng: random.Random, f: FieldSpec, version: int, element: bool = False):
    if not element and version in f.nullable_versions and rng.random() < 0.2:
        return None
    if f.is_array and not element:
        return [some_value(rng, f, version, True) for _ in range(rng.randrange(4))]
    if f.struct is not None:
        return {g.name: some_value(rng, g, version) for g in f.struct.fields}
    ktype = f.element
    if ktype in INT_RANGES:
        low, high = INT_RANGES[ktype]
        return rng.choice([low, high, max(low, -1), 1, rng.randint(low, high)])
    if ktype == "float64":
        return rng.random()
    if ktype == "bool":
        return rng.random() < 0.5
    if ktype == "string":
        return rng.choice(["", "topic-a", "é" * rng.randrange(200)])
    if ktype == "uuid":
        return rng.choice(["AAAAAAAAAAAAAAAAAAAAAA", "q83vEjRWeJCrze8SNFZ4kA"])
    return bytes(rng.randrange(256) for _ in range(rng.randrange(6)))


def mutated(rng: random.Random, buf: bytes) -> list[bytes]:
    """``buf`` and copies of it with one byte changed, inserted, flipped, or the end cut off."""
    out = [buf]
    for _ in range(MUTATIONS):
        b = bytearray(buf)
        kind = rng.randrange(4)
        if kind == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif kind == 1 and b:
            del b[rng.randrange(len(b)):]
        elif kind == 2:
            b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
        elif b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        out.append(bytes(b))
    return out


@pytest.mark.parametrize("spec,version", every_version(), ids=lambda v: getattr(v, "name", str(v)))
def test_every_message_and_version_reads_as_the_interpreter_reads_it(spec, version):
    rng = random.Random(f"{spec.name} {version}")
    read = 0
    for _ in range(20):
        data = {f.name: some_value(rng, f, version) for f in spec.fields}
        for buf in mutated(rng, encode_message(spec, version, data)):
            expected = interpreted(spec, version, buf)
            assert straight_line(spec, version, buf) == expected, buf.hex()
            read += expected is not None
    assert read >= 20  # at least the unmutated messages were read


def fixture_messages(fixtures_dir: Path) -> list[tuple[MessageSpec, int, bytes]]:
    """Every metadata record's (message, version, bytes) in the real logs."""
    schemas, out = registry(), []
    for name in FIXTURES:
        for path in sorted((fixtures_dir / name).rglob("*")):
            if path.suffix not in (".log", ".checkpoint"):
                continue
            for batch in file_batches(path):
                if not hasattr(batch, "payload") or batch.is_control:
                    continue
                for record in records(batch):
                    assert not isinstance(record, BadRecord)
                    reader = Reader(record.value)
                    reader.uvarint()
                    api_key, version = reader.uvarint(), reader.uvarint()
                    out.append((schemas.metadata_by_api_key[api_key], version, record.value[reader.pos:]))
    return out


def test_the_real_logs_records_and_their_mutations_read_as_the_interpreter_reads_them(fixtures_dir):
    found = fixture_messages(fixtures_dir)
    assert {spec.name for spec, _, _ in found} >= {"PartitionRecord", "PartitionChangeRecord", "TopicRecord",
                                                     "RegisterBrokerRecord", "FeatureLevelRecord", "NoOpRecord"}
    rng = random.Random(26)
    for spec, version, buf in found:
        assert straight_line(spec, version, buf) == interpreted(spec, version, buf) is not None
        for damaged in mutated(rng, buf)[1:3]:
            assert straight_line(spec, version, damaged) == interpreted(spec, version, damaged), damaged.hex()


def test_what_the_straight_line_reader_refuses_fails_in_the_interpreters_words():
    spec = registry()["PartitionRecord"]
    with pytest.raises(MessageError, match=r"^needed 4 bytes at position 0, only 2 left$"):
        decode_message(spec, 0, b"\x00\x01")
    data = message_decoder(spec, 1)(Reader(encode_message(spec, 1, spec.defaults())))
    whole = encode_message(spec, 1, data)
    with pytest.raises(MessageError, match=r"^1 bytes left over after PartitionRecord v1$"):
        decode_message(spec, 1, whole + b"\x00")
    assert decode_message(spec, 1, whole) == data


def framed_by_reader(payload: bytes, pos: int):
    try:
        return batches._frame_by_reader(payload, pos, 0)
    except MessageError:
        return None


def framed_straight(payload: bytes, pos: int):
    try:
        return batches._frame(payload, pos, len(payload))
    except messages.NOT_READ:
        return None


def record_with_headers() -> bytes:
    """A record with a key, varints of several bytes and two headers (one of a null key and value)."""
    body = bytearray(b"\x00")
    for value in (-3, 70_000):
        write_varint(body, value)
    for part in (b"key", b"v" * 300):
        write_varint(body, len(part))
        body += part
    write_varint(body, 2)
    for size in (1, 2, -1, -1):
        write_varint(body, size)
        body += b"h" * max(size, 0)
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body) * 2


def test_record_framing_read_straight_through_agrees_with_the_readers_on_real_and_damaged_records(fixtures_dir):
    rng = random.Random(62)
    payloads = [batch.payload for name in FIXTURES for path in sorted((fixtures_dir / name).rglob("*.log"))
                for batch in file_batches(path) if hasattr(batch, "payload")]
    record = record_with_headers()
    payloads += [record[:at] + bytes([byte]) + record[at + 1:]
                 for at in range(len(record)) for byte in (0x01, 0x7E, 0xFF)]
    framed = 0
    for payload in payloads:
        for damaged in mutated(rng, payload)[:4]:
            pos = 0
            while pos < len(damaged):
                expected = framed_by_reader(damaged, pos)
                assert framed_straight(damaged, pos) == expected, (damaged.hex(), pos)
                if expected is None:
                    break
                pos, framed = expected[0], framed + 1
    assert framed > 10_000
