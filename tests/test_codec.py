"""The Kafka binary format: real logs against their independent oracle, every codec, and damage."""

from __future__ import annotations

import collections
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftlake import codec
from kraftlake.metadata import uuids
from kraftlake.codec import batches
from kraftlake.metadata.rejections import Rejection
from kraftlake.codec.logdir import decode_buffer
from kraftlake.codec.writer import encode_events, record_key_value
from kraftlake.metadata.schemas import registry

FIXTURES = ("single-broker-shutdown", "single-broker-snapshot", "single-broker-restarts", "three-brokers-restarts")
SEGMENT = "__cluster_metadata-0/00000000000000000000.log"


def split(items):
    items = list(items)
    events = [i for i in items if isinstance(i, dict)]
    rejections = [i for i in items if isinstance(i, Rejection)]
    return events, rejections


def segment_bytes(fixtures_dir: Path, name: str) -> bytes:
    return (fixtures_dir / name / SEGMENT).read_bytes()


def batch_positions(buf: bytes) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, record count) of every batch, read straight off the headers."""
    out, pos = [], 0
    while pos + 12 <= len(buf):
        base, length = struct.unpack_from(">qi", buf, pos)
        count = struct.unpack_from(">i", buf, pos + 57)[0]
        out.append((pos, 12 + length, base, count))
        pos += 12 + length
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_real_logs_decode_completely_with_the_oracles_record_counts(fixtures_dir, name):
    events, rejections = split(codec.decode_file(fixtures_dir / name / SEGMENT))
    expected = json.loads((fixtures_dir / name / "expected-image.json").read_text())
    assert rejections == []
    assert dict(collections.Counter(e["type"] for e in events)) == expected["record_counts"]
    offsets = [e["offset"] for e in events]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


@pytest.mark.parametrize("name", FIXTURES)
def test_topic_ids_come_out_in_kafkas_text_form(fixtures_dir, name):
    events, _ = split(codec.decode_file(fixtures_dir / name / SEGMENT))
    expected = json.loads((fixtures_dir / name / "expected-image.json").read_text())
    decoded = {e["data"]["TopicId"]: e["data"]["Name"] for e in events if e["type"] == "TopicRecord"}
    assert decoded == {uuids.normalize(hex_id): topic for hex_id, topic in expected["topics"].items()}
    assert all(len(topic_id) == 22 for topic_id in decoded)


def test_snapshot_plus_tail_gives_the_segments_records_after_the_snapshot(fixtures_dir):
    directory = fixtures_dir / "single-broker-snapshot" / "__cluster_metadata-0"
    (snapshot,) = codec.list_partition_dir(directory)[1]
    end_offset, epoch = codec.snapshot_end_offset(snapshot)
    assert (end_offset, epoch) == (7209, 1)
    combined, rejections = split(codec.decode_partition_dir(directory))
    whole, _ = split(codec.decode_file(directory / "00000000000000000000.log"))
    assert rejections == []
    snapshot_part = [e for e in combined if e["offset"] < end_offset]
    assert snapshot_part[0]["type"] == "SnapshotHeaderRecord"
    assert snapshot_part[-1]["type"] == "SnapshotFooterRecord"
    assert [e["offset"] for e in snapshot_part] == list(range(end_offset - len(snapshot_part), end_offset))
    strip = lambda es: [{k: e[k] for k in ("offset", "leader_epoch", "timestamp", "type", "version", "data")}
                        for e in es]
    assert strip([e for e in combined if e["offset"] >= end_offset]) == \
        strip([e for e in whole if e["offset"] >= end_offset])
    # the snapshot holds the topics and partitions the full log created before its end offset
    snap_topics = {e["data"]["Name"] for e in snapshot_part if e["type"] == "TopicRecord"}
    log_topics = {e["data"]["Name"] for e in whole if e["type"] == "TopicRecord" and e["offset"] < end_offset}
    assert snap_topics == log_topics


def test_full_history_ignores_snapshots(fixtures_dir):
    directory = fixtures_dir / "single-broker-snapshot" / "__cluster_metadata-0"
    events, _ = split(codec.decode_partition_dir(directory, codec.FULL_HISTORY))
    assert events[0]["offset"] == 0 and len(events) == 7707


def test_quorum_state_file_is_read(fixtures_dir):
    state = codec.read_quorum_state(fixtures_dir / "single-broker-shutdown" / "__cluster_metadata-0" / "quorum-state")
    assert state["leaderId"] == 1 and state["leaderEpoch"] == 1 and state["currentVoters"] == [{"voterId": 1}]


# ---- every compression codec Kafka writes ----

def sample_events(n: int = 60) -> list[dict]:
    topic = uuids.from_bytes(bytes(range(16)))
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append({"type": "PartitionRecord", "version": 1, "timestamp": 1_700_000_000_000 + i,
                        "leader_epoch": 4, "data": {**registry()["PartitionRecord"].defaults(),
                                                    "PartitionId": i, "TopicId": topic, "Replicas": [1, 2, 3],
                                                    "Isr": [1, 2], "Leader": 1}})
        elif i % 3 == 1:
            out.append({"type": "PartitionChangeRecord", "version": 2, "timestamp": 1_700_000_000_000 + i,
                        "leader_epoch": 4, "data": {**registry()["PartitionChangeRecord"].defaults(),
                                                    "PartitionId": i, "TopicId": topic, "Isr": [2],
                                                    "EligibleLeaderReplicas": [1], "Leader": 2}})
        else:
            out.append({"type": "NoOpRecord", "version": 0, "timestamp": 1_700_000_000_000 + i,
                        "leader_epoch": 4, "data": {}})
    return out


@pytest.mark.parametrize("codec_name", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_compression_codec_decodes(codec_name):
    events = sample_events()
    buf = encode_events(events, batch_records=16, codecs=(codec_name,))
    attributes = struct.unpack_from(">h", buf, 21)[0]
    assert attributes & 0x07 == batches.CODEC_IDS[codec_name]
    decoded, rejections = split(decode_buffer(buf, "mem"))
    assert rejections == []
    assert [(e["offset"], e["type"], e["timestamp"], e["leader_epoch"], e["data"]) for e in decoded] == \
        [(i, e["type"], e["timestamp"], 4, e["data"]) for i, e in enumerate(events)]


COMPRESSED = ("confluent-command-0", "controlcenter-repartition-0")


@pytest.mark.parametrize("name", COMPRESSED)
def test_lz4_batches_of_kafkas_java_producer_decode_batch_by_batch(fixtures_dir, name):
    """Real lz4 batches against facts read off their headers without project code (expected-batches.json):
    each batch's CRC verifies, it decompresses, and it holds exactly its record count, with the offset
    deltas 0..lastOffsetDelta, every one a well-framed record."""
    root = fixtures_dir.parent / "compressed"
    expected = json.loads((root / "expected-batches.json").read_text())[name]
    buf = (root / name / "00000000000000000000.log").read_bytes()
    assert len(buf) == expected["bytes"]
    found, pos = [], 0
    while pos < len(buf):
        size = 12 + struct.unpack_from(">i", buf, pos + 8)[0]
        # the stored CRC-32C verifies, computed here with crc32c rather than trusted to the decoder
        assert crc32c.crc32c(buf[pos + 21:pos + size]) == struct.unpack_from(">I", buf, pos + 17)[0]
        batch = batches.parse_batch(buf, pos)  # raises on a CRC mismatch or a payload that does not decompress
        records = list(batches.records(batch))
        assert all(isinstance(r, batches.Record) for r in records)
        assert [r.offset - batch.base_offset for r in records] == list(range(batch.last_offset_delta + 1))
        found.append([batch.base_offset, batch.attributes & 0x07, batch.last_offset_delta, len(records), batch.size])
        pos += batch.size
    assert found == expected["per_batch"]
    assert len(found) == expected["batches"] and sum(f[3] for f in found) == expected["records"]


# The same real records, compressed by the libraries Kafka's Java producer uses (tests/data/KafkaCompress.java,
# run on the JVM that pyspark needs anyway): the codecs checked against an implementation other than the
# project's (which writes with Python's gzip and cramjam).
JAVA_CODECS = {"gzip": b"\x1f\x8b", "snappy": b"\x82SNAPPY\x00", "zstd": b"\x28\xb5\x2f\xfd",
               "lz4": b"\x04\x22\x4d\x18"}  # each format's magic bytes
JAVA_JARS = ("snappy-java", "zstd-jni", "lz4-java")


@pytest.fixture(scope="module")
def java_compressed(fixtures_dir, tmp_path_factory):
    """The 40 largest batches of the real three-brokers-restarts log (topic creations and failovers: many
    PartitionRecords and PartitionChangeRecords), in log order, cut by reading their headers (not with
    project code), and each batch's records section compressed by Java with every codec."""
    import pyspark

    java = shutil.which("java")
    jars = {name: sorted((Path(pyspark.__file__).parent / "jars").glob(f"{name}-*.jar")) for name in JAVA_JARS}
    missing = [name for name, found in jars.items() if not found]
    if java is None or missing:
        pytest.skip(f"needs a java on PATH (found {java}) and pyspark's jars {', '.join(JAVA_JARS)} "
                    f"(missing: {', '.join(missing) or 'none'})")
    buf = segment_bytes(fixtures_dir, "three-brokers-restarts")
    layout = sorted(sorted(batch_positions(buf), key=lambda batch: -batch[1])[:40])
    work = tmp_path_factory.mktemp("java-compressed")
    args = []
    for i, (pos, size, _, _) in enumerate(layout):
        assert struct.unpack_from(">h", buf, pos + 21)[0] & 0x07 == 0, "the fixture's batches are uncompressed"
        (work / f"{i}.records").write_bytes(buf[pos + 61:pos + size])
        args += [a for codec in JAVA_CODECS for a in (codec, str(work / f"{i}.records"), str(work / f"{i}.{codec}"))]
    classpath = ":".join(str(found[-1]) for found in jars.values())
    subprocess.run([java, "-cp", classpath, str(Path(__file__).parent / "data" / "KafkaCompress.java"), *args],
                   check=True, capture_output=True, timeout=120)
    return buf, layout, {codec: [(work / f"{i}.{codec}").read_bytes() for i in range(len(layout))]
                         for codec in JAVA_CODECS}


def rebatch(buf: bytes, pos: int, size: int, codec_id: int, body: bytes) -> bytes:
    """The batch at ``pos`` with ``body`` for its records and ``codec_id`` in its attributes: header fields
    kept, batchLength and the CRC-32C (crc32c, not the project's code) computed anew."""
    after_crc = bytearray(buf[pos + 21:pos + 61]) + body
    struct.pack_into(">h", after_crc, 0, struct.unpack_from(">h", buf, pos + 21)[0] | codec_id)
    head = bytearray(buf[pos:pos + 21])
    struct.pack_into(">i", head, 8, 61 - 12 + len(body))
    struct.pack_into(">I", head, 17, crc32c.crc32c(bytes(after_crc)))
    return bytes(head + after_crc)


@pytest.mark.parametrize("codec_name", list(JAVA_CODECS))
def test_batches_compressed_by_the_java_producers_libraries_decode_to_the_uncompressed_records(java_compressed,
                                                                                             codec_name):
    buf, layout, compressed = java_compressed
    rebuilt = b""
    for (pos, size, _, _), body in zip(layout, compressed[codec_name]):
        assert body.startswith(JAVA_CODECS[codec_name])  # really that codec's format
        rebuilt += rebatch(buf, pos, size, batches.CODEC_IDS[codec_name], body)
    original = b"".join(buf[pos:pos + size] for pos, size, _, _ in layout)
    expected, _ = split(decode_buffer(original, "x"))
    assert {e["type"] for e in expected} >= {"PartitionRecord", "PartitionChangeRecord", "TopicRecord"}
    events, rejections = split(decode_buffer(rebuilt, "x"))
    assert rejections == []
    strip = lambda es: [{k: e[k] for k in ("offset", "leader_epoch", "timestamp", "type", "version", "data")}
                        for e in es]
    assert strip(events) == strip(expected)
    assert len(events) == sum(count for *_, count in layout)


def test_snappy_in_xerial_framing_as_the_java_client_writes_it():
    payload = b"metadata" * 100
    framed = batches.compress(batches.CODEC_IDS["snappy"], payload)
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert batches.decompress(2, framed, len(payload)) == payload


def test_tagged_fields_and_defaults_survive_a_round_trip():
    event = sample_events()[1]
    key, value = record_key_value(event)
    assert key is None
    spec = registry()["PartitionChangeRecord"]
    decoded = codec.decode_message(spec, 2, value[3:])
    assert decoded["Isr"] == [2] and decoded["Leader"] == 2 and decoded["EligibleLeaderReplicas"] == [1]
    assert decoded["Replicas"] is None and decoded["LeaderRecoveryState"] == -1  # absent tags: defaults


# ---- damage: a clear rejection with its location, nothing valid lost ----

def test_crc_mismatch_rejects_only_that_batch(fixtures_dir):
    buf = bytearray(segment_bytes(fixtures_dir, "single-broker-shutdown"))
    layout = batch_positions(bytes(buf))
    pos, size, base, count = layout[10]
    buf[pos + size - 3] ^= 0x10  # inside the records: covered by the CRC
    events, rejections = split(decode_buffer(bytes(buf), "copy.log"))
    assert len(rejections) == 1
    (r,) = rejections
    assert (r.source, r.position, r.offset, r.error) == ("copy.log", pos, base, "CORRUPT_MESSAGE")
    assert "CRC" in r.reason and r.raw_length == size
    assert len(events) == 4929 - count
    assert [e["offset"] for e in events if base <= e["offset"] < base + count] == []


def test_truncated_last_batch_is_reported_and_everything_before_is_kept(fixtures_dir):
    buf = segment_bytes(fixtures_dir, "single-broker-shutdown")
    last_pos, last_size, last_base, last_count = batch_positions(buf)[-1]
    cut = buf[:last_pos + last_size // 2]
    events, rejections = split(decode_buffer(cut, "live.log"))
    assert len(events) == 4929 - last_count
    (r,) = rejections
    assert r.position == last_pos and r.offset == last_base and "truncated" in r.reason
    assert r.raw_length == len(cut) - last_pos


def test_garbage_appended_is_rejected_at_the_end_of_the_valid_log(fixtures_dir):
    buf = segment_bytes(fixtures_dir, "single-broker-restarts")
    garbage = b"this is not a record batch\n" * 40
    events, rejections = split(decode_buffer(buf + garbage, "g.log"))
    assert len(events) == 3072
    (r,) = rejections
    assert r.position == len(buf) and r.raw == garbage and r.raw_length == len(garbage)


def test_damaged_length_field_resynchronises_on_the_next_batch(fixtures_dir):
    buf = bytearray(segment_bytes(fixtures_dir, "single-broker-shutdown"))
    layout = batch_positions(bytes(buf))
    pos, size, base, count = layout[5]
    struct.pack_into(">i", buf, pos + 8, 7_000_000)  # batchLength now points far past the file's end
    events, rejections = split(decode_buffer(bytes(buf), "len.log"))
    (r,) = rejections
    assert r.position == pos and r.raw_length == size
    assert len(events) == 4929 - count


def test_flipped_base_offset_is_caught_although_outside_the_crc(fixtures_dir):
    buf = bytearray(segment_bytes(fixtures_dir, "single-broker-shutdown"))
    pos, size, base, count = batch_positions(bytes(buf))[20]
    buf[pos] ^= 0x40  # the top byte of baseOffset
    events, rejections = split(decode_buffer(bytes(buf), "off.log"))
    (r,) = rejections
    assert r.position == pos and "baseOffset" in r.reason
    assert len(events) == 4929 - count
    offsets = [e["offset"] for e in events]
    assert offsets == sorted(offsets)


def test_a_file_that_is_not_a_kafka_log(tmp_path):
    path = tmp_path / "notes.log"
    path.write_text("hello, this is a text file and not a log segment\n" * 10)
    events, rejections = split(codec.decode_file(path))
    assert events == []
    (r,) = rejections
    assert r.position == 0 and r.raw_length == path.stat().st_size and "no record batch" in r.reason


def _recrc(buf: bytearray, pos: int, size: int) -> None:
    struct.pack_into(">I", buf, pos + 17, crc32c.crc32c(bytes(buf[pos + 21:pos + size])))


@pytest.mark.parametrize("patch, error, words", [
    (lambda v: v[:1] + b"\x63" + v[2:], "INVALID_RECORD", "unknown metadata record api key 99"),
    (lambda v: v[:2] + b"\x09" + v[3:], "UNSUPPORTED_VERSION", "unknown version 9 of PartitionRecord"),
    (lambda v: v + b"\x00\x00", "INVALID_RECORD", "left over"),
])
def test_a_bad_record_is_rejected_alone_and_its_batch_neighbours_are_kept(patch, error, words):
    events = [e for e in sample_events(9)]
    key, value = record_key_value(events[3])
    bad_value = patch(value)
    records = []
    for i, e in enumerate(events):
        k, v = record_key_value(e)
        records.append((i, 0, k, bad_value if i == 3 else v))
    buf = batches.encode_batch(100, 4, 1_700_000_000_000, records)
    decoded, rejections = split(decode_buffer(buf, "bad.log"))
    assert [e["offset"] for e in decoded] == [100 + i for i in range(9) if i != 3]
    (r,) = rejections
    assert (r.offset, r.error, r.position) == (103, error, 0)
    assert words in r.reason and r.raw == bad_value


def unverifiable(buf: bytes) -> set[int]:
    """The header bytes outside the CRC that no reader can check without a neighbour: the first batch's
    partitionLeaderEpoch and the last batch's baseOffset, batchLength and partitionLeaderEpoch."""
    last_pos = batch_positions(buf)[-1][0]
    return set(range(12, 16)) | set(range(last_pos, last_pos + 16))


def assert_flip_is_caught(original: bytes, truth: dict[int, dict], position: int, bit: int) -> None:
    """Decoding never raises, every event it yields equals the original at that offset, and the flipped
    byte lies in a rejected part."""
    flipped = bytearray(original)
    flipped[position] ^= 1 << bit
    events, rejections = split(decode_buffer(bytes(flipped), "x", 0))
    where = f"bit {bit} of byte {position}"
    assert rejections, f"{where}: a flipped bit must be noticed"
    for event in events:
        assert event == truth[event["offset"]], where
    lost = len(truth) - len(events)
    assert lost <= max(count for *_, count in batch_positions(original)) * 2, where
    assert any(r.position <= position < r.position + max(r.raw_length or 0, 61) for r in rejections
               if r.position is not None), where


def test_every_single_bit_flip_in_the_first_five_batches_is_caught(fixtures_dir):
    """Exhaustive over a real log's first five batches (622 bytes: a LeaderChangeMessage control batch,
    a batch of four records, a RegisterBrokerRecord, NoOpRecords): every bit of every byte but the
    unverifiable ones."""
    whole = segment_bytes(fixtures_dir, "single-broker-restarts")
    pos, size, _, _ = batch_positions(whole)[4]
    original = whole[:pos + size]
    truth = {e["offset"]: e for e in split(decode_buffer(original, "x", 0))[0]}
    assert len(truth) == 8 and len(batch_positions(original)) == 5
    skipped = unverifiable(original)
    for position in range(len(original)):
        if position not in skipped:
            for bit in range(8):
                assert_flip_is_caught(original, truth, position, bit)


BIT_FLIP_EXAMPLES = int(os.environ.get("KRAFTLAKE_BIT_FLIP_EXAMPLES", "100"))


@pytest.fixture(scope="module")
def restarts_log(fixtures_dir):
    original = segment_bytes(fixtures_dir, "single-broker-restarts")
    return original, {e["offset"]: e for e in split(decode_buffer(original, "x", 0))[0]}


@settings(max_examples=BIT_FLIP_EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_single_bit_flip_in_a_whole_real_log_is_caught_and_keeps_the_rest(restarts_log, data):
    """The same anywhere in the 221 kB log, sampled: a fixed sequence of examples by default,
    KRAFTLAKE_BIT_FLIP_EXAMPLES for more."""
    original, truth = restarts_log
    skipped = unverifiable(original)
    position = data.draw(st.integers(0, len(original) - 1).filter(lambda p: p not in skipped))
    assert_flip_is_caught(original, truth, position, data.draw(st.integers(0, 7)))


def test_strict_reading_raises_with_the_location(fixtures_dir, tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    shutil.copytree(fixtures_dir / "single-broker-restarts" / "__cluster_metadata-0", directory)
    segment = directory / "00000000000000000000.log"
    segment.write_bytes(segment.read_bytes() + b"\x00" * 30)
    with pytest.raises(codec.CorruptLogError) as info:
        list(codec.read_partition_dir(directory))
    assert str(segment) in str(info.value) and "truncated" in str(info.value)



def test_a_default_the_schema_writes_as_a_json_number_is_kafkas_default():
    # DescribeQuorumResponse's replica timestamps: "default": -1 in Kafka's schema, a number, not text
    spec = registry()["DescribeQuorumResponse"]
    topics = {f.name: f for f in spec.fields}["Topics"].struct
    partitions = {f.name: f for f in topics.fields}["Partitions"].struct
    replica = {f.name: f for f in partitions.fields}["CurrentVoters"].struct
    assert replica.defaults()["LastFetchTimestamp"] == -1 and replica.defaults()["LastCaughtUpTimestamp"] == -1
    for version in (0, 1, 2):
        encoded = codec.encode_message(spec, version, spec.defaults())
        assert codec.decode_message(spec, version, encoded)["Topics"] == []
