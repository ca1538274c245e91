"""Python's cyclic garbage collector paused around work that allocates many objects and makes no cycles.

Three places allocate hundreds of thousands of live objects at once: a shard's step, a record made per
partition of a failover, and a decoded piece of a log segment. Every few hundred allocations the collector
walks what is young, and every few hundred thousand the whole heap (an image holds hundreds of thousands
of registrations): a third of a step's time (ADR 0004), 45 % of a broker failover on 100,000 partitions,
~15 % of a decoded piece (docs/performance.md). Reference counting still frees everything that holds no
cycle, which is all these blocks make; one home for the mechanism so each caller only says whether to age.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused(age: bool = True) -> Iterator[None]:
    """The collector off inside the block, as it was after.

    With ``age``, what was allocated meanwhile is put straight into the oldest generation on the way out:
    turned back on, the collector would first walk a failover's records as young objects (19 % of the
    failover at 10^6 partitions), while in the oldest generation only a full collection walks them, which
    usually comes after they are consumed and freed. (``gc.freeze`` then ``gc.unfreeze`` moves every
    tracked object there without walking any; skipped if anything else keeps objects frozen.) Without it,
    for blocks whose objects leave soon anyway (a worker's decoded piece, sent and dropped).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if age and gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if enabled:
            gc.enable()
