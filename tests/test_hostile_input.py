"""Inputs written by an attacker (issue 28): a log directory copied from anywhere, a JSON lines or Avro file
taken from someone else. Each attack is reproduced on a small crafted input; what is asserted is that it
costs no more than its limit (memory measured with tracemalloc, work counted, never wall-clock time), that
the bad part lands in ``rejected`` with its location, and that the valid data around it is kept."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tracemalloc
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable

import crc32c
import fastavro
import pytest

from kraftlake.codec import batches, events as events_mod
from kraftlake.codec.bounds import Limits
from kraftlake.codec.files import NotRegularFile
from kraftlake.codec.logdir import MappedFile, decode_buffer
from kraftlake.codec.writer import encode_events, record_key_value
from kraftlake.metadata.rejections import Rejection
from kraftlake.raft.replica import Replica, traffic_event
from kraftlake.storage import ingest
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.follow import Follower

REPO = Path(__file__).resolve().parent.parent
KIB, MIB = 1 << 10, 1 << 20
# a bomb's compressed bytes fit a batch; what they decompress to is bounded by the one record it claims
SMALL = Limits(batch_bytes=2 * MIB, record_bytes=256 * KIB, event_bytes=64 * KIB)
NOOP = {"type": "NoOpRecord", "version": 0, "timestamp": 1_700_000_000_000, "leader_epoch": 3, "data": {}}


def split(items: Iterable) -> tuple[list[dict], list[Rejection]]:
    items = list(items)
    return [i for i in items if isinstance(i, dict)], [i for i in items if isinstance(i, Rejection)]


def peak_bytes(work: Callable[[], object]) -> tuple[object, int]:
    """``work()``'s result and the most Python memory it held at once."""
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def raw_batch(base_offset: int, codec: str, body: bytes, record_count: int) -> bytes:
    """A v2 batch around an arbitrary (compressed) records section, its CRC right: only the size of what
    it decompresses to is wrong."""
    after_crc = struct.pack(">hiqqqhii", batches.CODEC_IDS[codec], max(record_count - 1, 0), NOOP["timestamp"],
                            NOOP["timestamp"], -1, -1, -1, record_count) + body
    return struct.pack(">qiibI", base_offset, 9 + len(after_crc), 3, 2, crc32c.crc32c(after_crc)) + after_crc


def bomb_body(codec: str, size: int) -> bytes:
    if codec == "snappy-raw":
        import cramjam
        return bytes(cramjam.snappy.compress_raw(bytes(size)))
    return batches.compress(batches.CODEC_IDS[codec], bytes(size))


# ---- 28.2: decompression bombs -----------------------------------------------------------------------

@pytest.mark.parametrize("codec", ["gzip", "snappy", "snappy-raw", "lz4", "zstd"])
def test_a_decompression_bomb_is_rejected_at_its_limit_and_its_neighbours_are_kept(codec):
    bomb = raw_batch(1, codec.split("-")[0], bomb_body(codec, 16 * MIB), 1)
    before = encode_events([NOOP], first_offset=0)
    segment = before + bomb + encode_events([NOOP], first_offset=2)
    (decoded, rejections), peak = peak_bytes(lambda: split(decode_buffer(segment, "bomb.log", limits=SMALL)))
    assert [e["offset"] for e in decoded] == [0, 2]
    (r,) = rejections
    assert (r.source, r.position, r.offset, r.error) == ("bomb.log", len(before), 1, "MESSAGE_TOO_LARGE")
    assert "more than its limit of 262,144 bytes" in r.reason
    # copies of the compressed bytes (the batch's, then its body's), then the output up to about twice its limit
    assert peak < 3 * len(segment) + 4 * SMALL.record_bytes, f"{codec}: {peak:,} bytes held for a 16 MiB bomb"


def test_a_batch_decompresses_to_at_most_its_record_count_times_the_largest_record():
    records = [(i, 0, None, bytes(40_000)) for i in range(3)]  # a records section of about 120 KB
    segment = batches.encode_batch(0, 1, NOOP["timestamp"], records, codec="zstd")
    ok, rejected = split(decode_buffer(segment, "x", limits=Limits(MIB, 50_000, MIB)))
    assert len(ok) == 0 and all("INVALID_RECORD" == r.error for r in rejected) and len(rejected) == 3  # not metadata
    _, (too_large,) = split(decode_buffer(segment, "x", limits=Limits(MIB, 30_000, MIB)))
    assert too_large.error == "MESSAGE_TOO_LARGE" and "limit of 90,000 bytes" in too_large.reason


def test_a_bomb_inside_a_json_lines_fetch_response_is_rejected_by_the_replica(tmp_path):
    response = traffic_event({"type": "FetchResponse", "source": 2, "destination": 1, "data": {
        "ErrorCode": 0, "HighWatermark": 0, "DivergingEpoch": {"Epoch": -1, "EndOffset": -1},
        "CurrentLeader": {"LeaderId": 2, "LeaderEpoch": 1}, "Records": []}}, NOOP["timestamp"])
    bomb = raw_batch(0, "zstd", bomb_body("zstd", 16 * MIB), 1)
    response["data"]["Responses"][0]["Partitions"][0]["Records"] = base64.b64encode(bomb).decode()
    path = tmp_path / "traffic.jsonl"
    path.write_text(json.dumps(response) + "\n")
    (event,) = events_mod.read_json_lines(path)
    properties = {"controller.quorum.voters": "1@a:1,2@b:2", "kraftlake.decode.record.max.bytes": str(SMALL.record_bytes)}
    (rows, _), peak = peak_bytes(lambda: Replica(1).apply({**event, "offset": 7}, properties))
    (rejected,) = [row for table, row in rows if table == "rejected"]
    assert (rejected["offset"], rejected["type"], rejected["error"]) == (7, "FetchResponse", "CORRUPT_MESSAGE")
    assert "more than its limit of 262,144 bytes" in rejected["reason"]
    assert peak < 4 * SMALL.record_bytes + 2 * MIB


def avro_blocks(path: Path, blocks: list[list[dict]], codec: str = "deflate") -> Path:
    schema = fastavro.parse_schema(events_mod.avro_event_schema())
    with open(path, "wb") as handle:
        writer = fastavro.write.Writer(handle, schema, codec=codec)
        for block in blocks:
            for event in block:
                writer.write({"type": event["type"], "version": event["version"], "timestamp": event["timestamp"],
                              "offset": None, "data": (f"kafka.metadata.{event['type']}", event["data"])})
            writer.flush()
    return path


def config_record(value: str) -> dict:
    return {"type": "ConfigRecord", "version": 0, "timestamp": NOOP["timestamp"], "leader_epoch": 3,
            "data": {"ResourceType": 4, "ResourceName": "", "Name": "x", "Value": value}}


@pytest.mark.parametrize("codec, window", [("deflate", 0), ("bzip2", 0), ("xz", 8 * MIB), ("snappy", 0)])
def test_an_avro_block_that_decompresses_past_its_limit_is_rejected_and_the_next_blocks_read(tmp_path, codec, window):
    """``window``: the decoder's own memory, xz's dictionary at the preset fastavro writes with."""
    good = [config_record("a"), config_record("b")]
    path = avro_blocks(tmp_path / "bomb.avro", [good, [config_record("0" * 16 * MIB)], good], codec)
    (read, rejections), peak = peak_bytes(lambda: split(events_mod.read_avro(path, SMALL)))
    assert [(e["position"], e["data"]["Value"]) for e in read] == [(0, "a"), (1, "b"), (3, "a"), (4, "b")]
    (r,) = rejections
    assert (r.position, r.unit, r.error) == (2, "record", "MESSAGE_TOO_LARGE")
    assert "Avro block at byte" in r.reason and "limit of 65,536 bytes" in r.reason
    assert peak < window + path.stat().st_size + 4 * SMALL.event_bytes + MIB


# ---- 28.3: resynchronisation after damage -------------------------------------------------------------

def repeated(pattern: bytes, size: int) -> bytes:
    return (pattern * (size // len(pattern) + 1))[:size]


def headers_to_the_end(size: int) -> bytes:
    """After one byte of garbage, back-to-back batch headers, each plausible in every field and claiming the
    rest of the file, each with a wrong CRC: every position is a candidate whose length is the file."""
    out = bytearray(b"\xff")
    while len(out) + 61 <= size:
        length = size - len(out) - 12
        out += struct.pack(">qiibIhiqqqhii", 0, length, 0, 2, 0, 0, 0, 0, 0, -1, -1, -1, 1)
    return bytes(out + bytes(size - len(out)))


def checksummed_bytes(monkeypatch, read: Callable[[], object]) -> int:
    """How many bytes ``read()`` fed to CRC-32C."""
    fed = [0]
    real = crc32c.crc32c

    def counting(data, value=0):
        fed[0] += len(data)
        return real(data, value)

    monkeypatch.setattr(crc32c, "crc32c", counting)
    try:
        read()
    finally:
        monkeypatch.setattr(crc32c, "crc32c", real)
    return fed[0]


@pytest.mark.parametrize("damage", [lambda size: repeated(b"\x02\x00\x08", size), headers_to_the_end],
                         ids=["02-00-08", "headers-to-the-end"])
def test_resynchronising_after_damage_costs_work_linear_in_the_file_size(monkeypatch, damage):
    work = {}
    for size in (MIB, 4 * MIB):
        data = damage(size)
        work[size] = checksummed_bytes(monkeypatch, lambda: split(decode_buffer(data, "d.log")))
        _, rejections = split(decode_buffer(data, "d.log"))
        assert [(r.position, r.raw_length) for r in rejections] == [(0, size)]  # nothing in it is a batch
    assert work[4 * MIB] <= 4.1 * work[MIB] + MIB, work  # checksumming the declared lengths: 16x


def test_resynchronising_in_follow_mode_costs_work_linear_in_the_segment_size(monkeypatch, tmp_path):
    work = {}
    for size in (MIB, 4 * MIB):
        directory = tmp_path / f"{size}" / "__cluster_metadata-0"
        directory.mkdir(parents=True)
        (directory / f"{0:020d}.log").write_bytes(encode_events([NOOP]) + headers_to_the_end(size))
        tables = DeltaRsTables(str(tmp_path / f"{size}" / "w"))
        follower = Follower(tables, directory)
        # the damage runs to the end of the active segment: it may yet become a batch, and waits
        work[size] = checksummed_bytes(monkeypatch, follower.poll)
        assert tables.read_arrow("metadata_log").num_rows == 1 and not tables.exists("rejected")
        (directory / f"{1:020d}.log").touch()  # the segment rolls: its bytes are final
        work[size] += checksummed_bytes(monkeypatch, follower.poll)
        assert tables.read_arrow("rejected").num_rows == 1
    assert work[4 * MIB] <= 4.1 * work[MIB] + MIB, work  # checksumming the declared lengths: 16x


@pytest.mark.parametrize("records, value_size", [(1, 10), (1, 3000), (1, 9000), (3, 30_000), (34, 30_000)])
def test_a_batch_after_damage_is_found_again_whatever_its_size(records, value_size):
    """The running checksums agree with checksumming the bytes: batches below, at and far above the distance
    between two of them (``resync.STEP``, 4 KiB) are found again after garbage."""
    events = [config_record("x" * value_size)] * (2 * records)
    first = encode_events(events[:records], first_offset=5, batch_records=records)
    second = encode_events(events[records:], first_offset=5 + records, batch_records=records)
    garbage = b"\x02\x00\x08" * 7
    data = garbage + first + b"\x02" * 100 + second
    decoded, rejections = split(decode_buffer(data, "g.log"))
    assert [e["offset"] for e in decoded] == list(range(5, 5 + 2 * records))
    assert [(r.position, r.raw_length) for r in rejections] == [(0, len(garbage)), (len(garbage) + len(first), 100)]


# ---- 28.5: a malformed line or record is rejected alone ----------------------------------------------

HEARTBEAT = {"type": "BrokerHeartbeatRequest", "version": 1, "timestamp": 1763580879457,
             "data": {"BrokerId": 1, "BrokerEpoch": 8, "WantShutDown": True}}


def quota(value: object) -> dict:
    return {"type": "ClientQuotaRecord", "version": 0, "timestamp": 1,
            "data": {"Entity": [{"EntityType": "user", "EntityName": "u"}], "Key": "producer_byte_rate",
                     "Value": value, "Remove": False}}


MALFORMED_LINES = {
    "nested": "[" * 30_000 + "]" * 30_000,
    "nested data": json.dumps({**HEARTBEAT, "data": {"BrokerId": 1}})[:-2] + ', "X": ' + "[" * 20_000 + "]" * 20_000 + "}}",
    "offset 10^20": json.dumps({**HEARTBEAT, "offset": 10**20}),
    "timestamp 10^20": json.dumps({**HEARTBEAT, "timestamp": 10**20}),
    "timestamp 1e300": json.dumps({**HEARTBEAT, "timestamp": 1e300}),
    "leader_epoch 2^40": json.dumps({**HEARTBEAT, "leader_epoch": 2**40}),
    "5000 digits": json.dumps(HEARTBEAT)[:-1] + ', "offset": ' + "9" * 5000 + "}",
    "float64 10^400": json.dumps(quota(10**400)),
    "lone surrogate": json.dumps(quota(1.0)).replace('"u"}', '"\\ud800"}'),
    "surrogate key": json.dumps({**HEARTBEAT, "data": {"\ud800" * 3: 1}}),
    "base64 not ASCII": json.dumps({"type": "FetchSnapshotResponse", "version": 0, "timestamp": 1, "data": {}})[:-2]
    + '"ErrorCode": 0}}',
    "not an object": "[1, 2, 3]",
    "not UTF-8": b'{"type": "\xff"}',
    "too long": json.dumps(quota("x" * 70_000)),
}


def test_every_malformed_line_is_rejected_alone_whatever_it_holds(tmp_path):
    lines = [json.dumps(HEARTBEAT).encode()]
    for text in MALFORMED_LINES.values():
        lines += [text if isinstance(text, bytes) else text.encode(), json.dumps(HEARTBEAT).encode()]
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    tables = DeltaRsTables(str(tmp_path / "w"))
    summary = ingest.ingest_source(tables, str(path), limits=SMALL)
    assert (summary.records, summary.rejected) == (len(MALFORMED_LINES) + 1, len(MALFORMED_LINES))
    rejected = sorted(tables.read_arrow("rejected").to_pylist(), key=lambda r: r["position"])
    assert [r["position"] for r in rejected] == list(range(2, 2 * len(MALFORMED_LINES) + 1, 2))
    reasons = dict(zip(MALFORMED_LINES, (r["reason"] for r in rejected)))
    assert reasons["nested"] == "nested deeper than any event can be"
    assert "offset must be an integer in 0..9223372036854775807" in reasons["offset 10^20"]
    assert "outside the milliseconds the log can hold" in reasons["timestamp 10^20"]
    assert "outside the milliseconds the log can hold" in reasons["timestamp 1e300"]
    assert "leader_epoch must be an int32" in reasons["leader_epoch 2^40"]
    assert "must be a float64" in reasons["float64 10^400"]
    assert "lone surrogate" in reasons["lone surrogate"]
    assert "longer than kraftlake.decode.event.max.bytes (65,536)" in reasons["too long"]
    assert all(len(r["reason"]) < 1000 and r["reason"].isascii() for r in rejected), "a reason quotes little"
    assert tables.read_arrow("metadata_log").num_rows == len(MALFORMED_LINES) + 1


def test_an_unforeseen_failure_on_one_line_rejects_that_line_only(tmp_path, monkeypatch):
    real = events_mod.validate_event

    def failing_on_epoch_9(obj):
        if obj.get("data", {}).get("BrokerEpoch") == 9:
            raise ZeroDivisionError("a bug in the validator")
        return real(obj)

    monkeypatch.setattr(events_mod, "validate_event", failing_on_epoch_9)
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(json.dumps({**HEARTBEAT, "data": {**HEARTBEAT["data"], "BrokerEpoch": e}})
                              for e in (8, 9, 10)) + "\n")
    read, (r,) = split(events_mod.read_json_lines(path))
    assert [e["position"] for e in read] == [1, 3]
    assert r.position == 2 and "ZeroDivisionError: 'a bug in the validator'" in r.reason


def test_a_line_far_longer_than_the_limit_is_read_past_without_being_held(tmp_path):
    path = tmp_path / "long.jsonl"
    with open(path, "wb") as out:
        out.write(json.dumps(HEARTBEAT).encode() + b"\n" + b"[" + b"0," * (8 * MIB) + b"0]\n")
        out.write(json.dumps(HEARTBEAT).encode() + b"\n")
    (read, rejections), peak = peak_bytes(lambda: split(events_mod.read_json_lines(path, SMALL)))
    assert [e["position"] for e in read] == [1, 3]
    (r,) = rejections
    assert (r.position, r.raw_length, len(r.raw), r.error) == (2, 16 * MIB + 3, SMALL.event_bytes, "MESSAGE_TOO_LARGE")
    assert r.raw.startswith(b"[0,0,")
    assert peak < 4 * MIB


def test_avro_values_no_column_holds_are_rejected_per_record(tmp_path):
    schema = fastavro.parse_schema(events_mod.avro_event_schema())
    records = [{"type": "ConfigRecord", "version": 0, "timestamp": ts, "offset": offset,
                "data": ("kafka.metadata.ConfigRecord", config_record("v")["data"])}
               for ts, offset in ((1, None), (2**62, None), (3, -5), (4, None))]
    path = tmp_path / "values.avro"
    with open(path, "wb") as handle:
        fastavro.writer(handle, schema, records)
    read, rejections = split(events_mod.read_avro(path))
    assert [e["timestamp"] for e in read] == [1, 4]
    assert [(r.position, r.error) for r in rejections] == [(1, "INVALID_REQUEST"), (2, "INVALID_REQUEST")]
    assert "outside the milliseconds" in rejections[0].reason and "offset must be" in rejections[1].reason


def test_a_truncated_avro_block_takes_only_the_rest_of_its_block(tmp_path):
    path = avro_blocks(tmp_path / "t.avro", [[config_record("a")], [config_record("b"), config_record("c")],
                                             [config_record("d")]], codec="null")
    data = path.read_bytes()
    at = data.index(b"\x02b")  # block 2's first record: the length of its string "b" made negative
    path.write_bytes(data[:at] + b"\x01" + data[at + 1:])
    read, rejections = split(events_mod.read_avro(path))
    assert [(e["position"], e["data"]["Value"]) for e in read] == [(0, "a"), (3, "d")]
    (r,) = rejections
    assert r.position == 1 and "does not decode" in r.reason and "1 records after it cannot be found" in r.reason


def test_decoded_records_whose_offset_or_timestamp_no_column_holds_are_rejected():
    key, value = record_key_value(NOOP)
    far = batches.encode_batch(2**63 - 2, 3, 0, [(0, 0, key, value), (1, 0, key, value), (2, 0, key, value)])
    late = batches.encode_batch(0, 3, 2**62, [(0, 0, key, value)])
    decoded, rejections = split(decode_buffer(far, "far.log"))
    assert [e["offset"] for e in decoded] == [2**63 - 2, 2**63 - 1]
    (r,) = rejections
    assert r.offset is None and "offset 9223372036854775808" in r.reason
    decoded, (r,) = split(decode_buffer(late, "late.log"))
    assert decoded == [] and r.offset == 0 and "timestamp" in r.reason


# ---- 28.6: links and FIFOs in a log directory ----------------------------------------------------------

SECRET = b"the reader's private key: 0123456789abcdef"


@contextmanager
def no_hang(seconds: int = 60):
    """A read that blocks forever (a FIFO) fails the test instead of hanging the suite; not a timing."""
    def expired(signum, frame):
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def hostile_directory(fixtures_dir: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The real single-broker-shutdown log, plus entries named like its files that are links to a private
    file of the reader's, a FIFO and a directory; what each is."""
    private = tmp_path / "private"
    private.write_bytes(SECRET)
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    shutil.copy(fixtures_dir / "single-broker-shutdown" / "__cluster_metadata-0" / "00000000000000000000.log", directory)
    (directory / "leader-epoch-checkpoint").write_text("0\n1\n1 0\n")
    (directory / "quorum-state").symlink_to(private)
    (directory / f"{9999:020d}.log").symlink_to(private)
    (directory / f"{7000:020d}-{1:010d}.checkpoint").symlink_to(private)
    os.mkfifo(directory / f"{99999:020d}.log")
    (directory / f"{88888:020d}.log").mkdir()
    return directory, {"quorum-state": "a symbolic link", f"{9999:020d}.log": "a symbolic link",
                       f"{7000:020d}-{1:010d}.checkpoint": "a symbolic link", f"{99999:020d}.log": "a FIFO",
                       f"{88888:020d}.log": "a directory"}


def test_links_and_fifos_in_a_log_directory_are_reported_and_never_read(fixtures_dir, tmp_path):
    directory, kinds = hostile_directory(fixtures_dir, tmp_path)
    tables = DeltaRsTables(str(tmp_path / "w"))
    with no_hang():
        summary = ingest.ingest_source(tables, str(directory))
    assert summary.records == 4929 and summary.rejected == len(kinds) - 1  # quorum-state: a quorum_files matter
    rejected = {Path(r["source"]).name: r for r in tables.read_arrow("rejected").to_pylist()}
    assert set(rejected) == set(kinds)
    for name, what in kinds.items():
        assert what in rejected[name]["reason"] and rejected[name]["error"] == "KAFKA_STORAGE_ERROR", name
        assert rejected[name]["raw"] is None
    files = tables.read_arrow("quorum_files").to_pylist()
    assert [f["kind"] for f in files] == ["leader-epoch-checkpoint"]
    for table in ("metadata_log", "rejected", "quorum_files"):
        assert SECRET not in str(tables.read_arrow(table).to_pylist()).encode(), table
    with no_hang():
        again = ingest.ingest_source(tables, str(directory))
    assert again.status == "already ingested"


def test_the_follower_skips_links_and_fifos_and_reports_them_once(fixtures_dir, tmp_path):
    directory, kinds = hostile_directory(fixtures_dir, tmp_path)
    tables = DeltaRsTables(str(tmp_path / "w"))
    follower = Follower(tables, directory)
    with no_hang():
        first, second = follower.poll(), follower.poll()
    assert (first.records, first.rejected) == (4929, len(kinds) - 1)  # quorum-state: not the follower's
    assert (second.records, second.rejected) == (0, 0)
    assert SECRET not in str(tables.read_arrow("rejected").to_pylist()).encode()


def test_a_link_the_user_names_is_followed_a_fifo_is_refused(fixtures_dir, tmp_path):
    """The path on the command line is the user's choice: a link there is read (docs/security.md); a FIFO
    there is refused at once instead of blocking ingest, and the dump job says so in one line."""
    link = tmp_path / "segment.log"
    link.symlink_to(fixtures_dir / "single-broker-shutdown" / "__cluster_metadata-0" / "00000000000000000000.log")
    tables = DeltaRsTables(str(tmp_path / "w"))
    assert ingest.ingest_source(tables, str(link)).records == 4929
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)
    with no_hang(), pytest.raises(NotRegularFile, match="not a regular file or a directory"):
        ingest.ingest_source(tables, str(fifo))
    code = subprocess.run([sys.executable, "jobs/dump.py", str(fifo)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO / "lib")}, timeout=120)  # killed if it blocks
    assert code.returncode == 2 and code.stdout == ""
    assert code.stderr.strip().splitlines() == [f"dump: {fifo}: a FIFO, not a regular file"]


def test_a_file_swapped_for_a_link_or_fifo_after_listing_is_not_opened(tmp_path):
    (tmp_path / "target").write_bytes(SECRET)
    (tmp_path / "link.log").symlink_to(tmp_path / "target")
    os.mkfifo(tmp_path / "fifo.log")
    with no_hang():
        for name, what in (("link.log", "symbolic link"), ("fifo.log", "FIFO")):
            with pytest.raises(NotRegularFile, match=what):
                MappedFile(tmp_path / name)


@pytest.mark.parametrize("state, checkpoint", [
    ('{"leaderEpoch": 1, "leaderId": "one"}', "0\n1\n99999999999 0\n"),
    ('{"leaderEpoch": 1, "currentVoters": [{"voterId": 4294967296}]}', "0\n1\n1 99999999999999999999\n"),
    ('{"leaderEpoch": ' + "[" * 5000 + "]" * 5000 + "}", "0\n" + "9" * 5000 + "\n"),
])
def test_quorum_files_holding_what_no_column_holds_are_rejected_and_the_log_kept(tmp_path, state, checkpoint):
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    (directory / f"{0:020d}.log").write_bytes(encode_events([NOOP]))
    (directory / "quorum-state").write_text(state)
    (directory / "leader-epoch-checkpoint").write_text(checkpoint)
    tables = DeltaRsTables(str(tmp_path / "w"))
    assert ingest.ingest_source(tables, str(directory)).records == 1
    rejected = tables.read_arrow("rejected").to_pylist()
    assert sorted(Path(r["source"]).name for r in rejected) == ["leader-epoch-checkpoint", "quorum-state"]
    assert {r["error"] for r in rejected} == {"CORRUPT_MESSAGE"}


# ---- 28.9 (codec): names and strings bounded as Kafka bounds them ------------------------------------

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


def topic_record(name: str) -> dict:
    return {"type": "TopicRecord", "version": 0, "timestamp": 1, "leader_epoch": 3,
            "data": {"Name": name, "TopicId": "QkJCQkJCQkJCQkJCQkJCQg"}}


def create_topics(name: str) -> dict:
    return {"type": "CreateTopicsRequest", "version": 7, "timestamp": 1,
            "data": {"Topics": [{"Name": name, "NumPartitions": 1, "ReplicationFactor": 1}]}}


def topic_config(resource: str, resource_type: int = 2, value: str = "1") -> dict:
    return {"type": "ConfigRecord", "version": 0, "timestamp": 1, "leader_epoch": 3,
            "data": {"ResourceType": resource_type, "ResourceName": resource, "Name": "retention.ms", "Value": value}}


@pytest.mark.parametrize("event, error, words", [
    (topic_record("t" * 249), None, None),
    (topic_record("t" * 250), "INVALID_TOPIC_EXCEPTION", "is longer than the max allowed length 249"),
    (topic_record("bad name!"), "INVALID_TOPIC_EXCEPTION",
     "contains one or more characters other than ASCII alphanumerics"),
    (topic_record(".."), "INVALID_TOPIC_EXCEPTION", "Topic name is invalid: '..' is not allowed"),
    (topic_config("$(touch /tmp/x)"), "INVALID_TOPIC_EXCEPTION", "Topic name is invalid: '$(touch /tmp/x)' contains"),
    (topic_config("1", resource_type=4), None, None),  # a broker's configs: not a topic name
    (topic_config("orders", value="v" * 32_767), None, None),
    (topic_config("orders", value="v" * 32_768), "INVALID_REQUEST", "a Kafka string holds at most 32,767"),
    (create_topics("t" * 250), None, None),  # a request: the controller answers INVALID_TOPIC_EXCEPTION
    (create_topics("t" * 40_000), "INVALID_REQUEST", "a Kafka string holds at most 32,767"),
])
def test_names_and_strings_are_bounded_as_kafka_bounds_them(event, error, words):
    if error is None:
        events_mod.validate_event(event)
        return
    with pytest.raises(events_mod.EventError) as info:
        events_mod.validate_event(event)
    assert info.value.error == error and words in str(info.value)


def test_a_40_mb_topic_name_is_rejected_and_so_is_an_illegal_name_in_a_log(tmp_path):
    path = tmp_path / "names.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in (topic_record("orders"), topic_record("x" * 40_000_000),
                                                      topic_record("\x1b[2Jé"))) + "\n")
    read, rejections = split(events_mod.read_json_lines(path))
    assert [e["data"]["Name"] for e in read] == ["orders"]
    assert [(r.position, r.error) for r in rejections] == [(2, "MESSAGE_TOO_LARGE"), (3, "INVALID_TOPIC_EXCEPTION")]
    assert "Topic name is invalid: '\\x1b[2Jé' contains" in rejections[1].reason  # a terminal escape, escaped
    segment = encode_events([topic_record("orders"), topic_record("a/b"), NOOP])
    decoded, (r,) = split(decode_buffer(segment, "names.log"))
    assert [e["type"] for e in decoded] == ["TopicRecord", "NoOpRecord"]
    assert (r.offset, r.position, r.error) == (1, 0, "INVALID_TOPIC_EXCEPTION")


def test_a_decoded_string_longer_than_kafka_allows_is_rejected_with_its_record():
    key, value = record_key_value(topic_config("orders", value="v" * 40_000))  # our writer does not check
    segment = batches.encode_batch(0, 3, 1, [(0, 0, *record_key_value(NOOP)), (1, 0, key, value)])
    decoded, (r,) = split(decode_buffer(segment, "long.log"))
    assert [e["offset"] for e in decoded] == [0]
    assert r.offset == 1 and r.error == "INVALID_RECORD" and "string of invalid length 40000" in r.reason
