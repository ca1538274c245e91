"""A simulated cluster's requests written into a warehouse, through the same ingest path as real input.

The simulator yields requests lazily; they are written as JSON lines files of ``chunk_lines`` requests
under ``<warehouse>/_simulate/`` and each file is ingested before the next is generated, so a run of
10^7 requests needs the memory of one chunk. Each chunk's offsets are checked against what ingest took:
the simulator numbers its requests as the log will, and a gap would make its broker epochs wrong.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kraftlake.sim.cluster import ClusterSimulator
from kraftlake.storage.ingest import ingest_source


class IngestMismatch(RuntimeError):
    """Ingest did not take a chunk at the offsets the simulator gave it (or rejected part of it)."""


@dataclass
class Written:
    """What a run wrote so far: requests, their types, and where the time went."""

    requests: int = 0
    chunks: int = 0
    generating_s: float = 0.0
    ingesting_s: float = 0.0
    by_type: Counter = field(default_factory=Counter)
    first_offset: int | None = None  # of the last chunk
    last_offset: int | None = None


def write_requests(warehouse: Any, simulator: ClusterSimulator, count: int, name: str, chunk_lines: int,
                   keep_chunks: bool = False, on_chunk: Callable[[Written], None] | None = None) -> Written:
    """Generate ``count`` requests and ingest them chunk by chunk (files ``<name>-<chunk>.jsonl``);
    ``on_chunk`` sees the totals after each. Raises ``IngestMismatch`` (the chunk is kept) when ingest
    takes other offsets than the simulator's."""
    folder = Path(warehouse.path("_simulate"))
    folder.mkdir(parents=True, exist_ok=True)
    written = Written()
    events = simulator.events(count)
    while written.requests < count:
        path = folder / f"{name}-{written.chunks:05d}.jsonl"
        mark = time.monotonic()
        lines = first = last = 0
        with open(path, "w") as handle:
            for event in events:
                handle.write(json.dumps(event, separators=(",", ":")) + "\n")
                written.by_type[event["type"]] += 1
                if lines == 0:
                    first = event["offset"]
                last = event["offset"]
                lines += 1
                if lines == chunk_lines:
                    break
        written.generating_s += time.monotonic() - mark
        if lines == 0:
            path.unlink()
            break
        mark = time.monotonic()
        summary = ingest_source(warehouse, str(path))
        written.ingesting_s += time.monotonic() - mark
        if summary.rejected or (summary.first_offset, summary.last_offset) != (first, last):
            raise IngestMismatch(f"{path}: ingest took offsets {summary.first_offset}..{summary.last_offset} with "
                                 f"{summary.rejected} rejected, expected {first}..{last}; see the rejected table")
        if not keep_chunks:
            path.unlink()
        written.requests += lines
        written.chunks += 1
        written.first_offset, written.last_offset = first, last
        if on_chunk is not None:
            on_chunk(written)
    return written
