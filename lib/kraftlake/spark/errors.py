"""Spark's reports of failures, said in one line.

A Python error in a task or in a data source's driver side reaches the job as Spark's message wrapped
around the whole Python traceback (once per attempt), the JVM's stack after it, and for a streaming query
the query's description: the operator wants what failed and the exception that failed it.
"""

from __future__ import annotations

PYTHON_TRACEBACK = "Traceback (most recent call last):"
SPARK_TAIL = ("\n=== Streaming Query ===", "\nDriver stacktrace:", "\n\tat ")


def _without_tail(error: str) -> str:
    for tail in SPARK_TAIL:
        error = error.split(tail, 1)[0]
    return error


def python_raised(error: str) -> str | None:
    """The exception line of the last Python traceback in ``error`` (the one raised last, not the ones it
    was raised from), if it holds one."""
    error = _without_tail(error)
    if PYTHON_TRACEBACK not in error:
        return None
    frames = error.rsplit(PYTHON_TRACEBACK, 1)[1].splitlines()
    return next((line.strip() for line in frames if line.strip() and not line[0].isspace()), None)


def spark_error(error: str) -> str:
    """A failed query's error as one line: what failed, as Spark says it, then the error that failed it."""
    raised = python_raised(error)
    error = _without_tail(error)
    if raised is None:
        return " ".join(line.strip() for line in error.splitlines() if line.strip())[:1000]
    head = error.split(PYTHON_TRACEBACK, 1)[0].strip()
    return f"{head[:400]} {raised[:600]}".strip()
