"""A Kafka log's records decoded on every core: the batches' order checked in one pass, their records in workers.

Decoding a record (its framing, its message, its row in Arrow) is nearly all of an ingest's time, and it
depends on the bytes of its own batch only. What depends on more than one batch (the CRC and header of
each, offsets and epochs that must continue the log, resynchronising after damage) is a cheap pass over
the headers that stays in the ingest's process (``codec.logdir.file_batches``): it cuts the accepted
batches into pieces, which worker processes decode into ``metadata_log`` batches. Results come back in
file order, at most ``ahead`` pieces in flight, so memory follows the piece size, not the log's.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Iterable, Iterator, Union

import pyarrow as pa

from kraftlake.codec.batches import parse_batch
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


def decode_piece(path: str, positions: list[int], min_offset: int | None, limits: Limits) -> Decoded:
    """The records of the batches at ``positions`` of ``path`` (each one ``file_batches`` accepted), as
    ``decode_file`` yields them; runs in a worker."""
    events: list[dict] = []
    rejections: list[tuple[int, Rejection]] = []
    with collector_paused(age=False):
        mapped = MappedFile(Path(path))
        try:
            for position in positions:
                for item in batch_items(parse_batch(mapped.buf, position, limits), path):
                    if isinstance(item, Rejection):
                        rejections.append((len(events), item))
                    elif min_offset is None or item["offset"] >= min_offset:
                        events.append(item)
        finally:
            mapped.close()
        return compact_events(events, metadata_log_schema()), rejections


def _jobs(segments: Iterable[Segment], limits: Limits, piece_records: int) -> Iterator[list[Item] | tuple]:
    """Each segment's accepted batches cut into pieces of about ``piece_records`` records (arguments of
    ``decode_piece``), and its rejected stretches between them, in file order."""
    for path, min_offset in segments:
        positions: list[int] = []
        records = 0
        for item in file_batches(path, limits):
            if isinstance(item, Rejection):
                if positions:
                    yield (str(path), positions, min_offset, limits)
                    positions, records = [], 0
                yield [item]
                continue
            positions.append(item.position)
            records += item.record_count
            if records >= piece_records:
                yield (str(path), positions, min_offset, limits)
                positions, records = [], 0
        if positions:
            yield (str(path), positions, min_offset, limits)


def parts(head: Iterable[Item], segments: Iterable[Segment], limits: Limits, executor: ProcessPoolExecutor,
          piece_records: int, ahead: int) -> Iterator[Part]:
    """``head`` (items read here: a snapshot's, entries that are not files), then the segments' records
    decoded by ``executor``'s workers, in order."""
    head = list(head)
    if head:
        yield head
    pending: deque[Future | list[Item]] = deque()
    for job in _jobs(segments, limits, piece_records):
        pending.append(job if isinstance(job, list) else executor.submit(decode_piece, *job))
        if len(pending) > ahead:
            done = pending.popleft()
            yield done if isinstance(done, list) else done.result()
    while pending:
        done = pending.popleft()
        yield done if isinstance(done, list) else done.result()


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
        return parts(head, segments, limits, self.executor, piece_records, ahead=2 * self.count)

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *_: object) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
