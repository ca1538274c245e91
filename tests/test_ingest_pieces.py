"""A Kafka log decoded by worker processes (``storage.pieces``) lands as the ingest's own process lands it:
the same ``metadata_log`` rows, the same rejections, the same summary, on every real fixture and on
generated logs damaged in each way the decoder knows; and a killed ingest leaves no worker behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streaming_helpers import REPO_ROOT, plain, sorted_rows, wait_for
from kraftlake.codec.batches import encode_batch
from kraftlake.codec.writer import encode_events, record_key_value
from kraftlake.sim.workload import generate
from kraftlake.storage import DeltaRsTables, pieces
from kraftlake.storage import ingest

NOW_S = 1_900_000_000.0  # the clock both ingests of a comparison read (a refusal's reason names it)


def ingested(root: Path, source: Path, workers: int, **options) -> tuple[dict, list[dict], list[dict]]:
    """(summary, metadata_log rows in offset order, rejected rows) of ``source`` ingested into a new
    warehouse, its records decoded by ``workers`` processes (1: the ingest's own)."""
    tables = DeltaRsTables(str(root))
    summary = ingest.ingest_source(tables, str(source), workers=workers, workers_min_bytes=0, batch_records=120,
                                   **options).as_dict()
    summary.pop("seconds")
    log = [{k: plain(v) for k, v in r.items()} for r in tables.read_arrow("metadata_log").sort_by("offset").to_pylist()]
    return summary, log, sorted_rows(tables.read_arrow("rejected").to_pylist())


@pytest.fixture
def frozen_clock(monkeypatch):
    monkeypatch.setattr(ingest.time, "time", lambda: NOW_S)


@pytest.fixture
def pieces_used(monkeypatch) -> list[int]:
    """How many sources were read through the workers (a comparison that never used them shows nothing)."""
    calls: list[int] = []
    original = pieces.Workers.parts

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(pieces.Workers, "parts", counted)
    return calls


@pytest.mark.parametrize("name,options", [("single-broker-shutdown", {}), ("single-broker-restarts", {}),
                                          ("single-broker-snapshot", {}),
                                          ("single-broker-snapshot", {"full_history": True}),
                                          ("single-broker-snapshot", {"from_snapshot": True}),
                                          ("three-brokers-restarts", {})])
def test_real_logs_land_the_same_through_workers(fixtures_dir, tmp_path, frozen_clock, pieces_used, name, options):
    source = fixtures_dir / name / "__cluster_metadata-0"
    plain_run = ingested(tmp_path / "plain", source, 1, **options)
    assert plain_run[0]["records"] > 0 and not pieces_used
    assert ingested(tmp_path / "workers", source, 2, **options) == plain_run
    assert pieces_used


def damaged_log(directory: Path) -> Path:
    """A generated partition directory with, in its first segment: batches compressed three ways, one whose
    bytes fail the CRC, garbage between two batches, a header whose baseOffset was bent, a batch holding a
    record of no known type between good ones, records timestamped days ahead of the clock, and a cut-off
    last batch; then a second segment starting below the end of the first (its first records are below
    the log's end)."""
    events = list(generate(3000, brokers=5, topics=6, partitions_per_topic=20, seed=7))
    for event in events[1900:1910]:
        event["timestamp"] = int(NOW_S * 1000) + 3 * 86_400_000
    head = encode_events(events[:1000], batch_records=40, codecs=("none", "gzip", "zstd"))
    odd = encode_batch(1000, events[1000]["leader_epoch"], events[1000]["timestamp"],
                       [(0, 0, *record_key_value(events[1000])), (1, 0, None, b"\x01\x7f\x00"),
                        (2, 0, *record_key_value(events[1001]))])
    tail = bytearray(encode_events(events[1002:2600], first_offset=1003, batch_records=40))
    tail[500] ^= 0x40  # inside the first batch after the odd one: its CRC fails
    bent = 40 * 61 * 10  # somewhere in the tail: the batch boundary at or after it gets a bent baseOffset
    starts, pos = [], 0
    while pos < len(tail):
        starts.append(pos)
        pos += 12 + int.from_bytes(tail[pos + 8:pos + 12], "big")
    at = next(s for s in starts if s >= bent)
    tail[at:at + 8] = (int.from_bytes(tail[at:at + 8], "big") + 7).to_bytes(8, "big")
    garbage_at = next(s for s in starts if s >= 2 * bent)
    segment = bytes(head) + odd + bytes(tail[:garbage_at]) + b"\xfe" * 77 + bytes(tail[garbage_at:-25])
    directory.mkdir(parents=True)
    (directory / f"{0:020d}.log").write_bytes(segment)
    second = encode_events(events[2500:], first_offset=2500, batch_records=40)
    (directory / f"{2500:020d}.log").write_bytes(second)
    return directory


def test_a_damaged_log_lands_the_same_through_workers(tmp_path, frozen_clock, pieces_used):
    source = damaged_log(tmp_path / "log" / "__cluster_metadata-0")
    plain_run = ingested(tmp_path / "plain", source, 1)
    errors = {(r["error"], r["reason"].split(" ")[0]) for r in plain_run[2]}
    assert {e for e, _ in errors} == {"CORRUPT_MESSAGE", "INVALID_RECORD", "INVALID_TIMESTAMP"}, errors
    assert any("below the log end offset" in r["reason"] for r in plain_run[2])
    assert any("unknown metadata record api key" in r["reason"] for r in plain_run[2])
    assert ingested(tmp_path / "workers", source, 2) == plain_run
    assert pieces_used


def test_strict_mode_fails_on_the_same_rejection_through_workers(tmp_path, frozen_clock):
    source = damaged_log(tmp_path / "log" / "__cluster_metadata-0")
    failures = []
    for workers in (1, 2):
        tables = DeltaRsTables(str(tmp_path / f"w{workers}"))
        with pytest.raises(ingest.StrictModeError) as info:
            ingest.ingest_source(tables, str(source), strict=True, workers=workers, workers_min_bytes=0,
                                 batch_records=120)
        failures.append(str(info.value))
        assert tables.read_arrow("metadata_log").num_rows == 0
    assert failures[0] == failures[1]


INGEST = """
import sys
sys.path.insert(0, {lib!r})
from kraftlake.storage import DeltaRsTables
from kraftlake.storage.ingest import ingest
ingest(DeltaRsTables(sys.argv[1]), sys.argv[2:], batch_records=200, workers=2, workers_min_bytes=0)
print("done", flush=True)
"""


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_a_killed_ingest_leaves_no_worker_and_runs_again_exact(tmp_path):
    logs, sizes = [], []
    for seed, size in ((1, 20_000), (2, 150_000)):  # the second goes on from the first, long enough to be killed in
        events = list(generate(size, brokers=5, topics=10, partitions_per_topic=50, seed=seed))
        directory = tmp_path / f"log{seed}" / "__cluster_metadata-0"
        directory.mkdir(parents=True)
        (directory / f"{sum(sizes):020d}.log").write_bytes(encode_events(events, first_offset=sum(sizes),
                                                                         batch_records=50))
        sizes.append(len(events))
        logs.append(str(directory))
    command = [sys.executable, "-c", INGEST.format(lib=str(REPO_ROOT / "lib")), str(tmp_path / "killed"), *logs]
    reference = subprocess.run([*command[:3], str(tmp_path / "uninterrupted"), *logs], capture_output=True,
                               text=True, timeout=300)
    assert reference.stdout == "done\n", reference.stderr

    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    committed = tmp_path / "killed" / "rejected" / "_delta_log" / f"{1:020d}.json"  # the first source's end
    found: list[int] = []
    first_pool: set[int] = set()  # each source has its own workers; the first's end once it has committed

    def decoding_the_second() -> bool:
        running = [c for c in children(process.pid) if alive(c)]
        if not committed.exists():
            first_pool.update(running)
            return process.poll() is not None
        found[:] = [c for c in running if c not in first_pool]
        return len(found) >= 2 or process.poll() is not None
    try:
        assert wait_for(decoding_the_second, 120, every=0.01)
        os.kill(process.pid, signal.SIGKILL)
        workers = [w for w in found if alive(w)]
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    try:
        assert process.returncode == -signal.SIGKILL and workers, \
            "the ingest ended before it could be killed among its workers"
        assert wait_for(lambda: not any(alive(w) for w in workers), 30, every=0.1), "workers outlived the ingest"
    finally:
        for worker in found:
            if alive(worker):
                os.kill(worker, signal.SIGKILL)
    killed = DeltaRsTables(str(tmp_path / "killed"))
    assert killed.read_arrow("metadata_log", columns=["offset"]).num_rows == sizes[0]  # the first source only
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.stdout == "done\n", again.stderr
    uninterrupted = DeltaRsTables(str(tmp_path / "uninterrupted"))
    for name in ("metadata_log", "rejected"):
        rows = [sorted_rows([{k: plain(v) for k, v in r.items()} for r in t.read_arrow(name).to_pylist()])
                for t in (killed, uninterrupted)]
        assert rows[0] == rows[1], name
