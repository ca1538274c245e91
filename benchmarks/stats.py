"""Small statistics for the report: percentiles, log-log slopes and what they say about growth, timing."""

from __future__ import annotations

import itertools
import math
import sys
import time
from typing import Callable, Iterable, Iterator

LINEAR_SLOPE = 1.15  # a log-log slope up to this is "linear": the fits of noisy timings scatter by ~0.1


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def timed(label: str, report: dict, records: int, fn: Callable, nbytes: int | None = None):
    start_ = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start_
    entry = {"seconds": round(seconds, 3), "records": records, "records_per_s": round(records / seconds)}
    if nbytes is not None:
        entry["mb_per_s"] = round(nbytes / seconds / 1e6, 2)
    report[label] = entry
    log(f"{label}: {records:,} records in {seconds:.2f} s = {entry['records_per_s']:,} records/s"
        + (f", {entry['mb_per_s']} MB/s" if nbytes is not None else ""))
    return result



def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile by linear interpolation between the closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def least_squares(points: list[tuple[float, float]]) -> tuple[float, float | None] | None:
    """Least-squares slope of y over x and its noise band, two standard errors of the slope (None with two
    points: no residual tells the noise); None with fewer than two points or a single x."""
    n = len(points)
    if n < 2:
        return None
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    if n < 3:
        return b, None
    residuals = sum((y - my - b * (x - mx)) ** 2 for x, y in points)
    return b, 2 * math.sqrt(residuals / (n - 2) / sxx)


def loglog_slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) over log(x): 1 is linear growth, 2 quadratic."""
    fitted = least_squares([(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0])
    return None if fitted is None else round(fitted[0], 3)


def fit(xs: list[float], ys: list[float]) -> dict:
    slope = loglog_slope(xs, ys)
    verdict = None if slope is None else "linear" if slope <= LINEAR_SLOPE else "worse than linear"
    return {"loglog_slope": slope, "fit": verdict}


def chunks(items: Iterable[dict], size: int) -> Iterator[list[dict]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch
