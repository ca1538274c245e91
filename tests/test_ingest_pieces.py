"""A Kafka log decoded in pieces (``storage.pieces``), by worker processes or by Spark's tasks
(``kraftlake.spark.decoders``), lands as the ingest's own process lands it: the same ``metadata_log`` rows,
the same rejections, the same summary, on every real fixture and on generated logs damaged in each way the
decoder knows; a piece shipped with its bytes decodes as from its file; a Spark task that fails ends the
ingest with one line and commits nothing; and a killed ingest leaves no worker behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from streaming_helpers import REPO_ROOT, plain, sorted_rows, wait_for
from kraftlake.cli import ingest as ingest_job
from kraftlake.codec.batches import BatchError, encode_batch
from kraftlake.codec.bounds import default_limits
from kraftlake.codec.writer import encode_events, record_key_value
from kraftlake.sim.workload import generate
from kraftlake.storage import DeltaRsTables, pieces
from kraftlake.storage import ingest

NOW_S = 1_900_000_000.0  # the clock both ingests of a comparison read (a refusal's reason names it)


def ingested(root: Path, source: Path, workers: int = 1, **options) -> tuple[dict, list[dict], list[dict]]:
    """(summary, metadata_log rows in offset order, rejected rows) of ``source`` ingested into a new
    warehouse, its records decoded by ``workers`` processes (1: the ingest's own) or by ``decoders``."""
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
    """How many sources were read in pieces (a comparison that never used them shows nothing)."""
    calls: list[int] = []
    original = pieces.parts

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(pieces, "parts", counted)
    return calls


@pytest.fixture(params=["workers", "spark"])
def decoders(request) -> Iterator[dict]:
    """The options of an ingest whose pieces are decoded by two worker processes, or by Spark's tasks in
    the test session's Spark (local[2]: its Python workers are processes of their own, which read nothing
    of the driver's but the shipped bytes)."""
    if request.param == "workers":
        yield {"workers": 2}
        return
    from kraftlake.spark.decoders import SparkDecoders
    with SparkDecoders(request.getfixturevalue("spark").sparkContext) as spark_decoders:
        yield {"decoders": spark_decoders}


REAL_LOGS = [("single-broker-shutdown", {}), ("single-broker-restarts", {}), ("single-broker-snapshot", {}),
             ("single-broker-snapshot", {"full_history": True}), ("single-broker-snapshot", {"from_snapshot": True}),
             ("three-brokers-restarts", {})]
# Spark's tasks on two of them (a job per piece: seconds each): the longest log, and a snapshot with segments
SPARK_LOGS = [REAL_LOGS[3], REAL_LOGS[5]]


@pytest.mark.parametrize("name,options,decoders", [(*log, "workers") for log in REAL_LOGS] +
                         [(*log, "spark") for log in SPARK_LOGS], indirect=["decoders"])
def test_real_logs_land_the_same_in_pieces(fixtures_dir, tmp_path, frozen_clock, pieces_used, decoders, name,
                                           options):
    source = fixtures_dir / name / "__cluster_metadata-0"
    plain_run = ingested(tmp_path / "plain", source, 1, **options)
    assert plain_run[0]["records"] > 0 and not pieces_used
    assert ingested(tmp_path / "pieces", source, **decoders, **options) == plain_run
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


def test_a_damaged_log_lands_the_same_in_pieces(tmp_path, frozen_clock, pieces_used, decoders):
    source = damaged_log(tmp_path / "log" / "__cluster_metadata-0")
    plain_run = ingested(tmp_path / "plain", source, 1)
    errors = {(r["error"], r["reason"].split(" ")[0]) for r in plain_run[2]}
    assert {e for e, _ in errors} == {"CORRUPT_MESSAGE", "INVALID_RECORD", "INVALID_TIMESTAMP"}, errors
    assert any("below the log end offset" in r["reason"] for r in plain_run[2])
    assert any("unknown metadata record api key" in r["reason"] for r in plain_run[2])
    assert ingested(tmp_path / "pieces", source, **decoders) == plain_run
    assert pieces_used


def test_strict_mode_fails_on_the_same_rejection_in_pieces(tmp_path, frozen_clock, decoders):
    source = damaged_log(tmp_path / "log" / "__cluster_metadata-0")
    failures = []
    for name, options in (("plain", {"workers": 1}), ("pieces", decoders)):
        tables = DeltaRsTables(str(tmp_path / name))
        with pytest.raises(ingest.StrictModeError) as info:
            ingest.ingest_source(tables, str(source), strict=True, workers_min_bytes=0, batch_records=120, **options)
        failures.append(str(info.value))
        assert tables.read_arrow("metadata_log").num_rows == 0
    assert failures[0] == failures[1]


def log_pieces(source: Path) -> list[pieces.Piece]:
    """The pieces of ``source``'s first segment, as an ingest cuts them (the rejected stretches left out)."""
    segment = sorted(source.glob("*.log"))[0]
    return [p for p in pieces._jobs([(segment, None)], default_limits(), 120) if isinstance(p, pieces.Piece)]


def assert_same(got: pieces.Decoded, expected: pieces.Decoded) -> None:
    assert got[0].equals(expected[0])
    assert got[1] == expected[1]


def test_a_shipped_piece_decodes_as_from_its_file(tmp_path):
    """Each batch is found in the shipped bytes where the ones before it end, and keeps its position in the
    file, in its events and in its rejections' locations: also when the piece's batches do not follow each
    other in the file."""
    found = log_pieces(damaged_log(tmp_path / "log" / "__cluster_metadata-0"))
    spread = pieces.Piece(found[1].path, found[0].batches[::2] + found[1].batches[1::3], None, default_limits())
    positions = set()
    for piece in [*found, spread]:
        shipped = pieces.ship(piece)
        assert len(shipped.data) == sum(size for _, size in piece.batches)
        decoded = pieces.from_ipc(pieces.decode_shipped(shipped))
        assert_same(decoded, pieces.decode_piece(piece))
        positions |= {r.position for _, r in decoded[1]}
        assert set(decoded[0].column("position").to_pylist()) <= {p for p, _ in piece.batches}
    odd = [r for p in found for _, r in pieces.decode_piece(p)[1] if "unknown metadata record api key" in r.reason]
    assert odd and odd[0].position in positions and odd[0].position > len(pieces.ship(found[0]).data), \
        "the rejection of the odd batch is located at its place in the file, not in the shipped bytes"


def test_shipped_bytes_that_no_longer_verify_fail_the_piece(tmp_path):
    """The ingest's header pass accepted them: changed on the way, they are a failure, not a rejection."""
    piece = log_pieces(damaged_log(tmp_path / "log" / "__cluster_metadata-0"))[0]
    shipped = pieces.ship(piece)
    changed = bytearray(shipped.data)
    changed[-1] ^= 0x01
    with pytest.raises(BatchError, match="CRC-32C mismatch"):
        pieces.decode_shipped(pieces.Shipped(piece, bytes(changed)))


def test_a_failed_spark_task_fails_the_ingest_in_one_line_and_commits_nothing(spark, tmp_path, frozen_clock,
                                                                              monkeypatch, capsys):
    """Every attempt of the task fails (its bytes were changed on the way): the job says why in one line,
    exit 1, and the warehouse holds nothing of the source; ingested again, it lands whole (and, progress not
    turned off, says first that it starts Spark: the seconds that takes are not a stuck ingest)."""
    source = damaged_log(tmp_path / "log" / "__cluster_metadata-0")
    original = pieces.ship

    def changed(piece: pieces.Piece) -> pieces.Shipped:
        shipped = original(piece)
        return pieces.Shipped(piece, shipped.data[:-1] + bytes([shipped.data[-1] ^ 0x01]))
    monkeypatch.setattr(pieces, "ship", changed)
    warehouse = tmp_path / "w"
    argv = ["--warehouse", str(warehouse), "--override", "kraftlake.ingest.decoders=spark", "--override",
            "kraftlake.ingest.batch.records=120", "--no-progress", str(source)]
    assert ingest_job.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ingest: decoding {source.resolve()}/{0:020d}.log bytes "), err
    assert "failed in Spark: " in err and "CRC-32C mismatch" in err, err
    assert err.endswith("; nothing of this source was committed\n"), err
    tables = DeltaRsTables(str(warehouse))
    assert tables.read_arrow("metadata_log").num_rows == 0 and not tables.exists("rejected")
    monkeypatch.setattr(pieces, "ship", original)
    assert ingest_job.main([a for a in argv if a != "--no-progress"]) == 0
    said = capsys.readouterr().err.splitlines()
    assert said[0] == "[ingest] starting a Spark session: kraftlake.ingest.decoders=spark", said
    assert said[1].startswith("[ingest] Spark session ready in ") and "core(s) now)" in said[1], said
    expected = ingested(tmp_path / "plain", source, 1)
    rows = [{k: plain(v) for k, v in r.items()} for r in tables.read_arrow("metadata_log").sort_by("offset").to_pylist()]
    assert rows == expected[1]
    assert sorted_rows(tables.read_arrow("rejected").to_pylist()) == expected[2]


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


def test_a_failed_jobs_cause_is_the_python_workers_last_exception():
    from kraftlake.spark.decoders import cause
    error = Exception(
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 4 times, "
        "most recent failure: Lost task 0.3 in stage 3.0 (TID 12) (127.0.0.1 executor 0): "
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/w/kraftlake/storage/pieces.py", line 140, in decode_shipped\n'
        "    raise BatchError(message)\n"
        "kraftlake.codec.batches.BatchError: CRC-32C mismatch: batch says 0x0a0dd6c1, bytes give 0xf86655c2\n"
        "\n\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:665)\n"
        "\tat java.base/java.lang.Thread.run(Thread.java:840)\n"
        "Caused by: org.apache.spark.api.python.PythonException: ValueError: not this one\n")
    assert cause(error) == "kraftlake.codec.batches.BatchError: CRC-32C mismatch: batch says 0x0a0dd6c1, bytes give " \
                           "0xf86655c2"
    assert cause(Exception("Py4JError: the Java gateway went away\nmore")) == "Py4JError: the Java gateway went away"
    assert cause(Exception("no Python here\n\tat x")) == "no Python here"
