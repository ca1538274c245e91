"""Spark work that Ctrl-C cancels, leaving the session usable for the next statement.

A KeyboardInterrupt raised while the main thread waits inside a py4j call abandons that call half-read,
and the JVM goes on running its jobs. So the work runs in a thread of its own under a job group of its
own, and the main thread only waits: on Ctrl-C it cancels the group (Spark interrupts the group's tasks),
waits for the work to return, and raises KeyboardInterrupt to its caller.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["cancellable"]

T = TypeVar("T")


def cancellable(spark: SparkSession, description: str, work: Callable[[], T]) -> T:
    """``work()``'s result (or exception), its Spark jobs in a job group described by ``description``."""
    group = f"kraftlake-{uuid.uuid4().hex}"
    outcome: dict[str, object] = {}

    def run() -> None:
        spark.sparkContext.setJobGroup(group, description[:200], interruptOnCancel=True)
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread as it is
            outcome["error"] = exc

    thread = threading.Thread(target=run, name=group, daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)
    except KeyboardInterrupt:
        spark.sparkContext.cancelJobGroup(group)
        thread.join()
        raise
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
