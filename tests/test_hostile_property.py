"""Random input against the decoder and ingest (issue 28): whatever the bytes or the JSON, the reader
finishes within a memory and CPU-time budget that grows with the input's size, never raises, and what it
reports is what it stored.

Each example runs in a child of ``hostile_worker.py`` forked for it: its address space may grow by the
budget at most (RLIMIT_AS: past it, the allocation fails), and a CPU-time limit (RLIMIT_CPU) kills a
runaway; nothing measures wall-clock time. Ingest goes through delta-rs, no Spark. The examples are the
same on every run (hypothesis' derandomised mode); ``KRAFTLAKE_HOSTILE_EXAMPLES=N`` runs N of each
instead of the default (155 in all, about 25 s).
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftlake.codec import batches
from kraftlake.codec.writer import encode_events
from kraftlake.sim.sample import build_events

HERE = Path(__file__).resolve().parent
EXAMPLES = int(os.environ.get("KRAFTLAKE_HOSTILE_EXAMPLES", "0"))
MIB = 1 << 20


def examples(default: int) -> settings:
    return settings(max_examples=EXAMPLES or default, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def budget(kind: str, size: int) -> dict:
    """Memory (address space the child may add) and CPU seconds for an input of ``size`` bytes: a fixed
    allowance for the interpreter's and the engines' own (delta-rs and Arrow reserve arenas when first
    used), plus a multiple of the input."""
    base = 256 * MIB if kind == "decode" else 1024 * MIB
    return {"memory": base + 64 * size, "cpu": 20 + 20 * (size // MIB)}


@pytest.fixture(scope="module")
def worker() -> Iterator[Callable[[dict], dict]]:
    process = subprocess.Popen([sys.executable, str(HERE / "hostile_worker.py")], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)

    def ask(request: dict) -> dict:
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        return json.loads(process.stdout.readline())

    try:
        yield ask
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, 9)
            process.wait()


def run(worker: Callable[[dict], dict], kind: str, data: bytes, name: str = "") -> dict:
    answer = worker({"kind": kind, "name": name, "data": base64.b64encode(data).decode(), **budget(kind, len(data))})
    assert "error" not in answer, f"{len(data)} bytes: {answer['error']}"
    return answer["ok"]


# ---- random bytes, random batches, damaged real batches -----------------------------------------------

def batch(base_offset: int, codec: int, count: int, last_delta: int, body: bytes) -> bytes:
    """A v2 batch of any header values around ``body``, its CRC right so that the reader goes past it."""
    after_crc = struct.pack(">hiqqqhii", codec, last_delta, 0, 0, -1, -1, -1, count) + body
    return struct.pack(">qiibI", base_offset, 9 + len(after_crc), 0, 2, crc32c.crc32c(after_crc)) + after_crc


@st.composite
def random_batch(draw: st.DrawFn) -> bytes:
    codec = draw(st.integers(0, 7))
    records = draw(st.binary(max_size=512))
    compressed = draw(st.booleans()) and 1 <= codec <= 4
    body = batches.compress(codec, records) if compressed else records
    count = draw(st.one_of(st.integers(-3, 40), st.integers(-2**31, 2**31 - 1)))
    last_delta = draw(st.one_of(st.integers(-3, 40), st.integers(-2**31, 2**31 - 1)))
    return batch(draw(st.integers(-2**63, 2**63 - 1)), codec, count, last_delta, body)


SAMPLE = encode_events([{**e, "leader_epoch": 1} for e in build_events()[:300]], batch_records=7,
                       codecs=("none", "gzip", "snappy", "lz4", "zstd"))


@st.composite
def damaged_log(draw: st.DrawFn) -> bytes:
    """The sample cluster's first records in batches of every codec, cut, overwritten and spliced."""
    data = bytearray(SAMPLE)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        data[at:at + draw(st.integers(0, 64))] = draw(st.binary(max_size=64))
    return bytes(data[:draw(st.integers(0, len(data)))] if draw(st.booleans()) else data)


BYTES = st.one_of(st.binary(max_size=4096),
                  st.lists(random_batch(), max_size=6).map(b"".join),
                  st.lists(st.one_of(random_batch(), st.binary(max_size=80)), max_size=8).map(b"".join),
                  damaged_log())


@examples(120)
@given(data=BYTES)
def test_random_bytes_decode_within_budget(worker, data):
    run(worker, "decode", data)


@examples(15)
@given(data=BYTES)
def test_random_bytes_ingest_as_a_segment_within_budget(worker, data):
    answer = run(worker, "ingest", data, f"{0:020d}.log")
    assert answer["kind"] == "segment"


# ---- random JSON lines -------------------------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.integers(-2**70, 2**70) | st.floats()
                    | st.text(max_size=20), lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)
HEARTBEAT = {"type": "BrokerHeartbeatRequest", "version": 1, "timestamp": 1763580879457,
             "data": {"BrokerId": 1, "BrokerEpoch": 8, "WantShutDown": True}}
GOOD = [HEARTBEAT, {"type": "TopicRecord", "version": 0, "timestamp": 1, "data": {"Name": "t", "TopicId": "QkJCQkJCQkJCQkJCQkJCQg"}},
        {"type": "FetchResponse", "version": 13, "timestamp": 1, "destination_id": 1,
         "data": {"Responses": [{"TopicId": "AAAAAAAAAAAAAAAAAAAAAQ", "Partitions": [{
             "PartitionIndex": 0, "Records": base64.b64encode(SAMPLE[:2000]).decode()}]}]}}]


@st.composite
def altered_event(draw: st.DrawFn) -> str:
    """A valid event with one value, at any depth, replaced by random JSON (or text that is not JSON)."""
    event = json.loads(json.dumps(draw(st.sampled_from(GOOD))))
    node, path = event, []
    while isinstance(node, (dict, list)) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else list(range(len(node)))))
        path.append((node, key))
        node = node[key]
    if path:
        parent, key = path[-1]
        parent[key] = draw(JSON)
    text = json.dumps(event)
    if draw(st.integers(0, 9)) == 0:
        text = text[:draw(st.integers(0, len(text)))] + draw(st.sampled_from(["[" * 3000, "\ud800", "9" * 5000, "\x00"]))
    return text


LINES = st.lists(st.one_of(altered_event(), JSON.map(json.dumps), st.text(max_size=40)), max_size=12)


@examples(20)
@given(lines=LINES)
def test_random_json_lines_ingest_within_budget(worker, lines):
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    answer = run(worker, "ingest", data, "events.jsonl")
    non_blank = [line for line in data.split(b"\n") if line.strip()]
    assert answer["records"] + answer["rejected"] == len(non_blank)
