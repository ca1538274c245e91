"""Writing the Kafka format: events into record batches, segments, snapshots and partition directories.

The mirror of the reader. It makes the sample data of the quickstart and the corrupted or compressed
logs of the tests in the exact binary form Kafka writes, so the reader is exercised on real bytes.
"""

from __future__ import annotations

import json
import struct
from itertools import cycle
from pathlib import Path
from typing import Iterable, Sequence

from kraftlake.codec.batches import encode_batch
from kraftlake.codec.logdir import METADATA_FRAME_VERSION
from kraftlake.codec.messages import encode_message, write_uvarint
from kraftlake.metadata.schemas import registry


def record_key_value(event: dict) -> tuple[bytes | None, bytes]:
    """The record key and value Kafka stores for a metadata or control event."""
    spec = registry()[event["type"]]
    data = {**spec.defaults(), **event.get("data", {})}
    body = encode_message(spec, event["version"], data)
    if spec.kind == "control":
        return struct.pack(">hh", 0, spec.control_type), body
    if spec.kind != "metadata":
        raise ValueError(f"{event['type']} is a {spec.kind}, not a record of the metadata log")
    header = bytearray()
    for value in (METADATA_FRAME_VERSION, spec.api_key, event["version"]):
        write_uvarint(header, value)
    return None, bytes(header) + body


def _is_control(event: dict) -> bool:
    return registry()[event["type"]].kind == "control"


def encode_events(events: Sequence[dict], *, first_offset: int = 0, batch_records: int = 20,
                  codecs: Iterable[str] = ("none",)) -> bytes:
    """Batches for ``events`` (in order; offsets from ``first_offset``), as a controller writes them:
    a control record alone in its batch, a new batch whenever the leader epoch changes, compression
    codecs taken in turn from ``codecs``."""
    codec_cycle = cycle(codecs)
    out = bytearray()
    offset = first_offset
    index = 0
    while index < len(events):
        first = events[index]
        group = [first]
        if not _is_control(first):
            while (index + len(group) < len(events) and len(group) < batch_records
                   and not _is_control(events[index + len(group)])
                   and events[index + len(group)]["leader_epoch"] == first["leader_epoch"]):
                group.append(events[index + len(group)])
        base_ts = first["timestamp"]
        records = [(i, e["timestamp"] - base_ts, *record_key_value(e)) for i, e in enumerate(group)]
        out += encode_batch(offset, first["leader_epoch"], base_ts, records, codec=next(codec_cycle),
                            control=_is_control(first))
        offset += len(group)
        index += len(group)
    return bytes(out)


def write_partition_dir(path: str | Path, events: Sequence[dict], *, batch_records: int = 20,
                        codecs: Iterable[str] = ("none",), snapshot: Sequence[dict] | None = None,
                        snapshot_end_offset: int | None = None, quorum_state: dict | None = None) -> Path:
    """A ``__cluster_metadata-0`` directory: one segment from offset 0, optionally a snapshot
    (``snapshot`` events, named for ``snapshot_end_offset``) and a ``quorum-state`` file."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{0:020d}.log").write_bytes(encode_events(events, batch_records=batch_records, codecs=codecs))
    if snapshot is not None:
        end = snapshot_end_offset if snapshot_end_offset is not None else len(events)
        epoch = snapshot[0]["leader_epoch"]
        (root / f"{end:020d}-{epoch:010d}.checkpoint").write_bytes(
            encode_events(snapshot, batch_records=batch_records))
    if quorum_state is not None:
        (root / "quorum-state").write_text(json.dumps(quorum_state))
    return root
