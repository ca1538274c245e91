"""An ingest's pieces decoded by Spark's tasks on the executors (``kraftlake.ingest.decoders=spark``).

The ingest's own process keeps what needs the whole log: the header pass that accepts batches and cuts
them into pieces, the sequencer, the Delta commit (``storage.pieces``, ``storage.ingest``). Each piece is a
Spark job of one task, shipped with its batches' bytes (an executor need not see the driver's files) and
answered with its Arrow batch as IPC bytes and its rejections. Jobs are submitted from threads, several
at once, so every executor core has a piece while the driver waits for the oldest (results are taken in
file order); what is in flight, not the log, bounds the memory.

A job that fails (a task that failed every attempt Spark gives it; damage in the log is a rejection,
never a failure) ends the ingest with ``DecodeFailure``, its cause in one line, before anything of the
source is committed.
"""

from __future__ import annotations

import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Iterable, Iterator

from kraftlake.codec.bounds import Limits
from kraftlake.metadata.rejections import Item
from kraftlake.spark.errors import python_raised
from kraftlake.storage import pieces

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["SparkDecoders"]

PIECES_PER_CORE = 2  # pieces in flight per executor core: one decoding, one waiting to start as it ends
MAX_IN_FLIGHT = 256  # whatever the cluster's size: each piece in flight holds its bytes in the driver


class SparkDecoders:
    """The pieces of every Kafka log an ingest reads, decoded by ``context``'s executors: one Spark job of
    one task per piece, ``PIECES_PER_CORE`` per core of the application in flight. The caller owns them:
    ``with`` stops what is still running, whatever ends the ingest."""

    def __init__(self, context: SparkContext) -> None:
        self.context = context
        self.group = f"kraftlake-ingest-{uuid.uuid4().hex}"  # the jobs cancelled together at the end
        # a thread per piece in flight, started as needed: at most ``parts``' ``ahead`` + 1 of them
        self.threads = ThreadPoolExecutor(MAX_IN_FLIGHT + 1, thread_name_prefix="kraftlake-decode")

    def wanted(self, size: int) -> bool:
        """Every Kafka log: whoever chose Spark's tasks chose them for the logs too big for one machine."""
        return True

    def parts(self, head: Iterable[Item], segments: Iterable[pieces.Segment], limits: Limits,
              piece_records: int) -> Iterator[pieces.Part]:
        # the cores the application has now, asked at each source: a cluster's executors register after the
        # session starts
        ahead = min(PIECES_PER_CORE * max(self.context.defaultParallelism, 1), MAX_IN_FLIGHT)
        return pieces.parts(head, segments, limits, self.submit, piece_records, ahead)

    def submit(self, piece: pieces.Piece) -> Future[pieces.Decoded]:
        """``piece`` shipped (its bytes read here, now) to a Spark job of its own, run from a thread."""
        return self.threads.submit(self._decode, pieces.ship(piece))

    def _decode(self, shipped: pieces.Shipped) -> pieces.Decoded:
        piece = shipped.piece
        first, (last, size) = piece.batches[0][0], piece.batches[-1]
        where = f"{piece.path} bytes {first}..{last + size - 1}"
        self.context.setJobGroup(self.group, f"kraftlake ingest: decode {where}", interruptOnCancel=True)
        try:
            encoded = self.context.parallelize([shipped], 1).map(pieces.decode_shipped).collect()[0]
        except Exception as exc:
            raise pieces.DecodeFailure(f"decoding {where} failed in Spark: {cause(exc)}") from None
        return pieces.from_ipc(encoded)

    def __enter__(self) -> SparkDecoders:
        return self

    def __exit__(self, failed: type[BaseException] | None, *_: object) -> None:
        if failed is not None:  # the ingest ends early (a failure, strict mode, a stop): so do its jobs
            self.context.cancelJobGroup(self.group)
        self.threads.shutdown(wait=True, cancel_futures=True)


def cause(exc: BaseException) -> str:
    """What made a Spark job fail, in one line: the last exception a Python worker raised, when the job's
    error carries its traceback, else the first line of the error."""
    text = str(exc)
    return python_raised(text) or next((s.strip() for s in text.splitlines() if s.strip()), type(exc).__name__)
