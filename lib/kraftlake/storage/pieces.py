"""A Kafka log's records decoded on every core: the batches' order checked in one pass, their records in workers.

Decoding a record (its framing, its message, its row in Arrow) is nearly all of an ingest's time, and it
depends on the bytes of its own batch only. What depends on more than one batch (the CRC and header of
each, offsets and epochs that must continue the log, resynchronising after damage) is a cheap pass over
the headers that stays in the ingest's process (``codec.logdir.file_batches``): it cuts the accepted
batches into pieces, which worker processes decode into ``metadata_log`` batches. Results come back in
file order, at most ``ahead`` pieces in flight, so memory follows the piece size, not the log's.

Who decodes a piece is the caller's ``submit``: the ingest's own forked processes (``Workers``, which read
the piece from the file), or Spark's tasks (``kraftlake.spark.decoders``), which may run where the file is
not: the piece then travels with its bytes (``ship``), and its batches are decoded from them where they land
(``decode_shipped``), at the file's positions still.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import threading
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol, Union

import pyarrow as pa

from kraftlake.codec.batches import RecordBatch, parse_batch
from kraftlake.codec.bounds import Limits
from kraftlake.codec.logdir import MappedFile, batch_items, file_batches
from kraftlake.metadata.collector import collector_paused
from kraftlake.metadata.rejections import Item, Rejection
from kraftlake.metadata.tables import metadata_log_schema
from kraftlake.storage.tables import compact_events

ORPHAN_POLL_S = 0.5  # how often a worker looks whether the ingest that started it is still there

# A piece decoded: its events as one metadata_log batch (``compact_events``: ``widen`` gives the whole
# schema), and the rejections among them, each with the number of the piece's events before it.
Decoded = tuple[pa.RecordBatch, list[tuple[int, Rejection]]]
# What the ingest's sequencer reads, in the source's order: items read in its own process, or a piece.
Part = Union[list[Item], Decoded]
# A file to decode and the offset below which its records are not taken (a snapshot stands for them).
Segment = tuple[Path, Union[int, None]]


def worker_count(setting: int) -> int:
    """``kraftlake.ingest.workers``: 0 means one per core."""
    return setting if setting > 0 else os.cpu_count() or 1


def pool(workers: int) -> ProcessPoolExecutor:
    """Workers forked from the ingest's process. Started fresh (spawn, forkserver) they would run the
    caller's main script again, which a script without a ``__main__`` guard does not survive; a forked
    worker runs Python and pyarrow only, never the delta-rs threads it inherits a copy of."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_orphan_watch,
                               initargs=(os.getpid(),))


def _orphan_watch(parent: int) -> None:
    """Ends this worker once the ingest that started it is gone (killed, say): a forked worker holds its
    own copy of the pipe it waits on, so it would never see the end of it and would wait forever."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL_S)
        os._exit(1)
    threading.Thread(target=watch, name="kraftlake-orphan-watch", daemon=True).start()


@dataclass(frozen=True)
class Piece:
    """Accepted batches of one file, decoded together: ``batches`` are (position, size) in the file, in file
    order; records below ``min_offset`` are not taken (a snapshot stands for them)."""

    path: str
    batches: tuple[tuple[int, int], ...]
    min_offset: int | None
    limits: Limits


@dataclass(frozen=True)
class Shipped:
    """A piece with its batches' bytes, one after the other: what a task that cannot read the file decodes."""

    piece: Piece
    data: bytes


# A piece decoded where it was shipped to: its batch as Arrow IPC bytes (what crosses to the ingest's
# process without pickling each value), and its rejections.
Encoded = tuple[bytes, list[tuple[int, Rejection]]]
# lz4 buffers: a piece's columns repeat themselves (its file's name on every row), so a sixth of the bytes
# cross the cluster and the JVMs (12 MB -> 2 MB for 50,000 events) for ~3 ms to read them back
IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


class DecodeFailure(RuntimeError):
    """A piece the ingest's header pass accepted could not be decoded where it was sent (a task that failed
    every attempt, bytes changed on the way): the ingest stops and commits nothing of the source. Damage in
    the log itself is never this: it is a rejection."""


def _decoded(batches: Iterable[RecordBatch], path: str, min_offset: int | None) -> Decoded:
    """The records of ``batches`` (each one ``file_batches`` accepted, at its position in ``path``), as
    ``decode_file`` yields them."""
    events: list[dict] = []
    rejections: list[tuple[int, Rejection]] = []
    with collector_paused(age=False):
        for batch in batches:
            for item in batch_items(batch, path):
                if isinstance(item, Rejection):
                    rejections.append((len(events), item))
                elif min_offset is None or item["offset"] >= min_offset:
                    events.append(item)
        return compact_events(events, metadata_log_schema()), rejections


def decode_piece(piece: Piece) -> Decoded:
    """``piece`` decoded from its file; runs in a worker process of the ingest."""
    mapped = MappedFile(Path(piece.path))
    try:
        return _decoded((parse_batch(mapped.buf, position, piece.limits) for position, _ in piece.batches),
                        piece.path, piece.min_offset)
    finally:
        mapped.close()


def ship(piece: Piece) -> Shipped:
    """``piece`` with its batches' bytes, read in the ingest's process (the bytes its header pass checked)."""
    mapped = MappedFile(Path(piece.path))
    try:
        view = memoryview(mapped.buf)
        try:
            return Shipped(piece, b"".join(view[position:position + size] for position, size in piece.batches))
        finally:
            view.release()
    finally:
        mapped.close()


def decode_shipped(shipped: Shipped) -> Encoded:
    """``shipped`` decoded from its own bytes, each batch at its position in the file (in its events and in
    its rejections' locations), as ``decode_piece`` decodes it from the file; runs in a Spark task. Bytes
    that no longer verify (the header pass accepted them) raise: a failure, not a rejection."""
    piece, data = shipped.piece, shipped.data
    starts = itertools.accumulate((size for _, size in piece.batches), initial=0)
    batch, rejections = _decoded((replace(parse_batch(data, start, piece.limits), position=position)
                                  for (position, _), start in zip(piece.batches, starts)),
                                 piece.path, piece.min_offset)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=IPC_OPTIONS) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes(), rejections


def from_ipc(encoded: Encoded) -> Decoded:
    """What ``decode_shipped`` returned, as ``decode_piece`` returns it."""
    data, rejections = encoded
    return pa.ipc.open_stream(data).read_next_batch(), rejections


def _jobs(segments: Iterable[Segment], limits: Limits, piece_records: int) -> Iterator[list[Item] | Piece]:
    """Each segment's accepted batches cut into pieces of about ``piece_records`` records, and its rejected
    stretches between them, in file order."""
    for path, min_offset in segments:
        batches: list[tuple[int, int]] = []
        records = 0
        for item in file_batches(path, limits):
            if isinstance(item, Rejection):
                if batches:
                    yield Piece(str(path), tuple(batches), min_offset, limits)
                    batches, records = [], 0
                yield [item]
                continue
            batches.append((item.position, item.size))
            records += item.record_count
            if records >= piece_records:
                yield Piece(str(path), tuple(batches), min_offset, limits)
                batches, records = [], 0
        if batches:
            yield Piece(str(path), tuple(batches), min_offset, limits)


def parts(head: Iterable[Item], segments: Iterable[Segment], limits: Limits,
          submit: Callable[[Piece], Future[Decoded]], piece_records: int, ahead: int) -> Iterator[Part]:
    """``head`` (items read here: a snapshot's, entries that are not files), then the segments' records,
    each piece decoded by ``submit``, in order."""
    head = list(head)
    if head:
        yield head
    pending: deque[Future | list[Item]] = deque()
    for job in _jobs(segments, limits, piece_records):
        pending.append(job if isinstance(job, list) else submit(job))
        if len(pending) > ahead:
            done = pending.popleft()
            yield done if isinstance(done, list) else done.result()
    while pending:
        done = pending.popleft()
        yield done if isinstance(done, list) else done.result()


class Decoders(Protocol):
    """Who decodes an ingest's pieces: ``Workers``, or Spark's tasks (``kraftlake.spark.decoders``)."""

    def wanted(self, size: int) -> bool:
        """Whether a Kafka log of ``size`` bytes is read in pieces by these decoders."""

    def parts(self, head: Iterable[Item], segments: Iterable[Segment], limits: Limits,
              piece_records: int) -> Iterator[Part]:
        """``parts`` with these decoders."""


class Workers:
    """The worker processes of one ingest: started at their first use (a small source never needs them),
    stopped with the ingest, whatever ends it."""

    def __init__(self, count: int, min_bytes: int) -> None:
        self.count, self.min_bytes = count, min_bytes
        self.executor: ProcessPoolExecutor | None = None

    def wanted(self, size: int) -> bool:
        """Whether a Kafka log of ``size`` bytes is decoded by workers."""
        return self.count > 1 and size >= self.min_bytes

    def parts(self, head: Iterable[Item], segments: Iterable[Segment], limits: Limits,
              piece_records: int) -> Iterator[Part]:
        if self.executor is None:
            self.executor = pool(self.count)
        return parts(head, segments, limits, lambda piece: self.executor.submit(decode_piece, piece), piece_records,
                     ahead=2 * self.count)

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *_: object) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
