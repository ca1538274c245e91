"""Ingest under concurrency and crashes: real processes writing one warehouse at once, and ingest killed
with SIGKILL at random moments then run again. Never a lost record, never one twice, never an offset
given twice (no Spark: ingest commits through delta-rs)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from streaming_helpers import REPO_ROOT, at_once, generate_log, kill_seed, plain, wait_for
from kraftlake.storage import DeltaRsTables
from kraftlake.storage.ingest import ingest, ingest_source

BAD_LINE = '{"type": "BrokerHeartbeatRequest", "version": 1, "timestamp": 1, "data": {"BrokerId": "three"}}'


def write_source(path: Path, seed: int, size: int) -> Path:
    """A generated log as JSON lines with one invalid line in the middle (it must land in ``rejected``)."""
    lines = [json.dumps(e) for e in generate_log(seed, size).events]
    lines.insert(len(lines) // 2, BAD_LINE)
    path.write_text("\n".join(lines) + "\n")
    return path


def _ingest(root: str, source: str) -> tuple:
    summary = ingest_source(DeltaRsTables(root), source)
    return source, summary.status, summary.first_offset, summary.last_offset


def test_concurrent_ingests_all_succeed_and_no_offset_is_given_twice(tmp_path: Path) -> None:
    sources = [str(write_source(tmp_path / f"source-{i}.jsonl", seed=20 + i, size=400)) for i in range(3)]
    lines = {s: Path(s).read_text().splitlines() for s in sources}
    bad = {s: lines[s].index(BAD_LINE) + 1 for s in sources}  # line numbers count from 1
    runs = sources + [sources[0]]  # the same bytes twice, at the same moment
    root = str(tmp_path / "warehouse")
    outcomes = at_once(_ingest, [(root, s) for s in runs])
    assert all(o[1] in ("ingested", "already ingested") for o in outcomes), outcomes

    tables = DeltaRsTables(root)
    log = tables.read_arrow("metadata_log", columns=["offset", "source", "position"]).sort_by("offset").to_pylist()
    assert [r["offset"] for r in log] == list(range(len(log))), "offsets are not 0, 1, 2, ... once each"
    expected = {(s, n) for s in sources for n in range(1, len(lines[s]) + 1) if n != bad[s]}
    got = [(r["source"], r["position"]) for r in log]
    assert len(got) == len(set(got)) and set(got) == expected, "a record lost or ingested twice"
    for source in sources:  # each source's events took consecutive offsets, in the file's order
        mine = [r for r in log if r["source"] == source]
        assert [r["offset"] for r in mine] == list(range(mine[0]["offset"], mine[0]["offset"] + len(mine)))
        assert [r["position"] for r in mine] == sorted(r["position"] for r in mine)
    rejected = tables.read_arrow("rejected", columns=["source", "position"]).to_pylist()
    assert sorted((r["source"], r["position"]) for r in rejected) == sorted(bad.items())


INGEST = """
import sys
sys.path.insert(0, {lib!r})
from kraftlake.storage import DeltaRsTables
from kraftlake.storage.ingest import ingest
ingest(DeltaRsTables(sys.argv[1]), sys.argv[2:], batch_records=300)
print("done", flush=True)
"""


def rows(tables: DeltaRsTables, name: str) -> list[dict]:
    table = tables.read_arrow(name)
    return sorted(({k: plain(v) for k, v in r.items()} for r in table.to_pylist()),
                  key=lambda r: json.dumps(r, sort_keys=True, default=repr))


def commits(root: Path) -> int:
    """Versions of ``metadata_log`` committed so far (its Delta log's JSON files, the table's creation
    included)."""
    return len(list((root / "metadata_log" / "_delta_log").glob("*.json")))


def shortest_gap(root: Path) -> float:
    """The shortest time between two successive data commits of ``metadata_log`` (the work one commit
    covers; the process's start-up before the first is left out, so a kill aimed within it lands)."""
    times = sorted(p.stat().st_mtime for p in (root / "metadata_log" / "_delta_log").glob("*.json"))
    return min(later - earlier for earlier, later in zip(times[1:], times[2:]))


def test_ingest_killed_after_drawn_commits_then_run_again_ends_exact(tmp_path: Path) -> None:
    """Each kill is aimed at a drawn moment after a drawn commit of ``metadata_log`` that leaves work to
    do, and the test checks it landed there: the process still running when SIGKILL came, ended by it,
    and the table holding at least that commit and not yet all of them."""
    sources = [str(write_source(tmp_path / f"source-{i}.jsonl", seed=30 + i, size=1500)) for i in range(6)]
    killed_root = tmp_path / "killed"
    command = [sys.executable, "-c", INGEST.format(lib=str(REPO_ROOT / "lib")), str(killed_root), *sources]

    started = time.monotonic()
    uninterrupted = subprocess.run([*command[:3], str(tmp_path / "uninterrupted"), *sources], capture_output=True,
                                   text=True, timeout=300)
    assert uninterrupted.stdout == "done\n", uninterrupted.stderr
    duration = time.monotonic() - started
    total = commits(tmp_path / "uninterrupted")
    gap = shortest_gap(tmp_path / "uninterrupted")
    assert total >= 4, f"{total} commits leave too few places to kill at"

    seed = kill_seed(20251125)
    rng = random.Random(seed)
    kills = []
    while len(kills) < 3 and commits(killed_root) + 1 <= total - 1:
        target = rng.randint(commits(killed_root) + 1, total - 1)  # a commit after which a source is left
        delay = rng.uniform(0.0, 0.5 * gap)  # into the work that follows it
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert wait_for(lambda: commits(killed_root) >= target or process.poll() is not None, 120,
                            every=0.005)
            time.sleep(delay)
            running = process.poll() is None
            os.kill(process.pid, signal.SIGKILL)
            process.wait(30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(30)
        landed = commits(killed_root)
        where = (f"seed {seed}: kill {len(kills) + 1} aimed {delay:.3f} s after commit {target} of {total} "
                 f"(commits {gap:.3f} s apart at least)")
        assert running and process.returncode == -signal.SIGKILL, f"{where}, but the process had exited"
        assert target <= landed < total, f"{where}, but it landed after commit {landed}"
        kills.append((target, landed))
    assert len(kills) >= 2, f"seed {seed}: only {kills}"
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.stdout == "done\n", again.stderr

    killed, reference = DeltaRsTables(str(killed_root)), DeltaRsTables(str(tmp_path / "uninterrupted"))
    what = f"seed {seed}: killed after commits {kills} (an uninterrupted run takes {duration:.1f} s)"
    for name in ("metadata_log", "rejected"):
        assert rows(killed, name) == rows(reference, name), f"{name} differs; {what}"
    assert ingest(killed, sources)[0].status == "already ingested"
