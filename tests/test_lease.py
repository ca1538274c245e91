"""One controller per warehouse (``kraftlake.storage.lease``): real processes racing for the lease, a
lease taken over only once expired or once its holder is gone, renewals, a standby waiting for the lease,
and the controller job turning a second controller away while the first goes on and a standby taking over
once the first is killed."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest
from pyspark.sql import SparkSession

from servers import start, stop, wait_for_line
from streaming_helpers import (REPO_ROOT, assert_same_tables, at_once, committed_batches, committed_offset,
                               controller_command, controller_env, generate_log, in_background, ingest_jsonl,
                               logged_events, reference_tables, wait_for, warehouse_tables, why_failed, write_jsonl)
from kraftlake.cli.controller import main
from kraftlake.cli.launcher import INTERRUPTED, USAGE, run_job
from kraftlake.storage import DeltaRsTables, Warehouse
from kraftlake.storage.lease import Holder, Lease, LeaseHeld

TTL_MS = 60_000


def _race(root: str) -> tuple:
    lease = Lease(root, "controller", TTL_MS)
    try:
        lease.acquire()
        return "won", os.getpid(), lease.epoch
    except LeaseHeld as exc:
        return "refused", os.getpid(), exc.state.holder.pid


def test_of_candidates_starting_together_exactly_one_takes_the_lease(tmp_path: Path) -> None:
    candidates = 4
    outcomes = at_once(_race, [(str(tmp_path),)] * candidates)
    winners = [o for o in outcomes if o[0] == "won"]
    assert len(winners) == 1, outcomes
    [(_, winner, epoch)] = winners
    assert epoch == 1  # the table's creation is epoch 0, the first acquisition 1
    assert sorted(o[2] for o in outcomes if o[0] == "refused") == [winner] * (candidates - 1)


class Clock:
    """A candidate's clock, set where the test needs it."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


HOLD = """
import sys, time
sys.path.insert(0, {lib!r})
from kraftlake.storage.lease import Lease
lease = Lease({root!r}, "controller", {ttl_ms})
if {renew}:
    with lease.held():
        print("held", lease.epoch, flush=True)
        while lease.lost is None:
            time.sleep(0.05)
        print("lost:", lease.lost, flush=True)
else:
    lease.acquire()
    print("held", lease.epoch, flush=True)
    time.sleep(600)
"""


@contextmanager
def holder_process(root: Path, ttl_ms: int, renew: bool) -> Iterator[subprocess.Popen]:
    """Another process holding the lease (renewing it or not) until the block ends or it is killed."""
    code = HOLD.format(lib=str(REPO_ROOT / "lib"), root=str(root), ttl_ms=ttl_ms, renew=renew)
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().startswith("held ")
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(30)


def test_a_live_holders_lease_is_taken_over_only_once_it_expired(tmp_path: Path) -> None:
    with holder_process(tmp_path, TTL_MS, renew=False) as holder:
        state, _ = Lease(str(tmp_path), "controller", TTL_MS).look()
        clock = Clock(state.renewed_ms / 1000 + TTL_MS / 1000)  # exactly ttl after its renewal: not expired
        candidate = Lease(str(tmp_path), "controller", TTL_MS, clock)
        with pytest.raises(LeaseHeld) as refused:
            candidate.acquire()
        message = str(refused.value)
        renewed = datetime.fromtimestamp(state.renewed_ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")
        for part in (f"another controller is running on the warehouse {tmp_path}: pid {holder.pid} on host "
                     f"{socket.gethostname()}, started ", f"last renewed {renewed} (60 s ago)",
                     "this one did not start and the running one is untouched"):
            assert part in message, message
        clock.now += 0.002
        candidate.acquire()
        assert candidate.epoch == state.epoch + 1
        with pytest.raises(LeaseHeld, match=f"pid {os.getpid()} "):  # the new holder's, alive and renewed
            Lease(str(tmp_path), "controller", TTL_MS).acquire()
        candidate.release()
        last = Lease(str(tmp_path), "controller", TTL_MS)
        last.acquire()  # a released lease is free at once
        assert last.epoch == state.epoch + 3
        last.release()


def test_the_lease_of_a_killed_holder_on_this_host_is_free_at_once(tmp_path: Path) -> None:
    with holder_process(tmp_path, TTL_MS, renew=False) as holder:
        with pytest.raises(LeaseHeld, match=f"pid {holder.pid} "):
            Lease(str(tmp_path), "controller", TTL_MS).acquire()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
    lease = Lease(str(tmp_path), "controller", TTL_MS)
    state, _ = lease.look()
    assert state.holder.pid == holder.pid and state.holder.is_gone()
    lease.acquire()  # well within the ttl: the holder is known to be gone
    assert lease.epoch == state.epoch + 1
    lease.release()


def test_a_holder_on_another_host_is_never_presumed_gone() -> None:
    assert not Holder("some-other-host", 1, None, 0).is_gone()
    assert not Holder.this_process(0).is_gone()


def test_a_lease_this_process_left_behind_is_free_to_it_but_not_one_it_holds(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A release that failed (a full disk) leaves the lease to this process's next start; a lease some
    object of this process still holds is refused like any other."""
    with Lease(str(tmp_path), "controller", TTL_MS).held():
        with pytest.raises(LeaseHeld, match=f"pid {os.getpid()} "):
            Lease(str(tmp_path), "controller", TTL_MS).acquire()
    left = Lease(str(tmp_path), "controller", TTL_MS)
    left.acquire()

    def disk_full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(Lease, "_commit", disk_full)
        with pytest.raises(OSError):
            left.release()
    assert Lease(str(tmp_path), "controller", TTL_MS).look()[0].holder.pid == os.getpid()  # still recorded
    again = Lease(str(tmp_path), "controller", TTL_MS)
    again.acquire()
    assert again.epoch == 4  # created, taken, released, taken and left, taken again
    again.release()


def test_renewals_keep_the_lease_and_a_holder_taken_over_learns_it_lost(tmp_path: Path) -> None:
    ttl_ms = 1_500
    with holder_process(tmp_path, ttl_ms, renew=True) as holder:
        lease = Lease(str(tmp_path), "controller", ttl_ms)
        first_renewal = lease.look()[0].renewed_ms
        assert wait_for(lambda: lease.look()[0].renewed_ms != first_renewal, 30), "no renewal"
        with pytest.raises(LeaseHeld):
            lease.acquire()
        # a candidate whose clock says the renewals stopped an hour ago takes the lease over
        Lease(str(tmp_path), "controller", ttl_ms, Clock(time.time() + 3600)).acquire()
        lost = holder.stdout.readline()
        assert lost.startswith("lost: the controller lease on ") and f"taken over by pid {os.getpid()}" in lost
        assert holder.wait(30) == 0
    assert lease.look()[0].holder.pid == os.getpid(), "the holder that lost it did not release the new one"


class Polls:
    """A standby's stop condition that moves its clock ``step`` seconds at each poll and says stop after
    ``limit`` polls."""

    def __init__(self, clock: Clock, step: float, limit: int) -> None:
        self.clock, self.step, self.limit, self.count = clock, step, limit, 0

    def __call__(self) -> bool:
        self.count += 1
        self.clock.now += self.step
        return self.count > self.limit


def test_a_standby_waits_until_a_live_holders_lease_expired_or_it_is_told_to_stop(tmp_path: Path) -> None:
    with holder_process(tmp_path, TTL_MS, renew=False) as holder:
        state, _ = Lease(str(tmp_path), "controller", TTL_MS).look()
        clock = Clock(state.renewed_ms / 1000)
        told = Polls(clock, 0.4 * TTL_MS / 1000, limit=1)
        waited: list[Holder] = []
        with pytest.raises(LeaseHeld, match=f"pid {holder.pid} "):
            Lease(str(tmp_path), "controller", TTL_MS, clock).acquire(1, told, waited.append)
        assert told.count == 2 and [h.pid for h in waited] == [holder.pid]
        assert Lease(str(tmp_path), "controller", TTL_MS).look()[0] == state  # the standby wrote nothing

        clock.now = state.renewed_ms / 1000
        polls = Polls(clock, 0.4 * TTL_MS / 1000, limit=10)
        waited.clear()
        standby = Lease(str(tmp_path), "controller", TTL_MS, clock)
        standby.acquire(1, polls, waited.append)
        assert polls.count == 3  # 0.8 ttl after the renewal: held; 1.2 ttl: expired, taken
        assert [h.pid for h in waited] == [holder.pid]  # said once, however many polls
        assert standby.epoch == state.epoch + 1 and holder.poll() is None
        standby.release()


def test_a_standby_takes_the_lease_as_soon_as_its_killed_holder_is_dead(tmp_path: Path) -> None:
    """The holder killed is left a zombie (not reaped), as a killed controller's driver whose JVM died with
    it stays until an init reaps it: dead all the same."""
    with holder_process(tmp_path, TTL_MS, renew=False) as holder:
        state, _ = Lease(str(tmp_path), "controller", TTL_MS).look()
        standby = Lease(str(tmp_path), "controller", TTL_MS)
        waited: list[Holder] = []
        waiting, errors = in_background(lambda: standby.acquire(5, waiting=waited.append))
        assert wait_for(lambda: bool(waited) or not waiting.is_alive(), 30), errors
        assert [h.pid for h in waited] == [holder.pid] and waiting.is_alive()
        assert Lease(str(tmp_path), "controller", TTL_MS).look()[0] == state
        os.kill(holder.pid, signal.SIGKILL)
        waiting.join(30)  # well within the ttl, before the holder is reaped
        assert not waiting.is_alive() and not errors
        assert Path(f"/proc/{holder.pid}").exists(), "reaped before the standby took over: no zombie tested"
        assert standby.epoch == state.epoch + 1 and standby.holder.pid == os.getpid()
        standby.release()


# --- the controller job: a second one is turned away, a standby waits and takes over ---------------

def _continuous(warehouse: Path, *extra: str) -> list[str]:
    return [*controller_command(warehouse, 1000, once=False), "--override",
            "kraftlake.controller.trigger.interval.ms=200", *extra]


def test_a_second_controller_is_refused_and_a_standby_takes_over_a_killed_one(tmp_path: Path) -> None:
    """A running controller (a real job), a second one turned away before it starts Spark, a standby
    that waits behind it writing nothing, then the running one killed with SIGKILL (its JVM with it) and
    the standby taking over: the tables end as one replay of the whole log."""
    warehouse = tmp_path / "warehouse"
    checkpoint = warehouse / "_checkpoints" / "controller"
    log = generate_log(seed=11, size=60)
    ingest_jsonl(DeltaRsTables(str(warehouse)), write_jsonl(log.events[:30], tmp_path / "first.jsonl"))
    first = start(_continuous(warehouse), tmp_path / "first.log", controller_env(), REPO_ROOT)
    standby = None
    try:
        assert wait_for(lambda: bool(committed_batches(checkpoint)) or first.poll() is not None, 180), \
            why_failed((tmp_path / "first.log").read_text())
        second = subprocess.run(controller_command(warehouse, 1000), cwd=REPO_ROOT, env=controller_env(),
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 1
        assert f"another controller is running on the warehouse {warehouse}: pid {first.pid} on host " \
               f"{socket.gethostname()}, started " in second.stderr, second.stderr
        assert "Only one controller may run per warehouse" in second.stderr
        assert "log4j" not in second.stderr + second.stdout  # turned away before Spark started

        lease_before, _ = Lease(str(warehouse), "controller", TTL_MS).look()
        standby_log = tmp_path / "standby.log"
        standby = start(_continuous(warehouse, "--standby"), standby_log, controller_env(), REPO_ROOT)
        wait_for_line(standby_log, rf"\[controller\] standby: waiting for the controller lease held by pid "
                                   rf"{first.pid} on host ", standby, 180)
        ingest_jsonl(DeltaRsTables(str(warehouse)), write_jsonl(log.events[30:45], tmp_path / "second.jsonl"))
        end = DeltaRsTables(str(warehouse)).max_value("metadata_log", "offset")
        # the running controller was not touched: it takes the events ingested now
        assert wait_for(lambda: committed_offset(checkpoint) == end or first.poll() is not None, 120), \
            why_failed((tmp_path / "first.log").read_text())
        assert Lease(str(warehouse), "controller", TTL_MS).look()[0].epoch == lease_before.epoch  # nor the lease

        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
        ingest_jsonl(DeltaRsTables(str(warehouse)), write_jsonl(log.events[45:], tmp_path / "third.jsonl"))
        end = DeltaRsTables(str(warehouse)).max_value("metadata_log", "offset")
        wait_for_line(standby_log, r"\[controller\] standby: took the controller lease over", standby, 120)
        assert wait_for(lambda: committed_offset(checkpoint) == end or standby.poll() is not None, 180), \
            why_failed(standby_log.read_text())
        state, _ = Lease(str(warehouse), "controller", TTL_MS).look()
        assert state.epoch == lease_before.epoch + 1 and state.holder.pid == standby.pid
        assert_same_tables(warehouse_tables(Warehouse(str(warehouse))),
                           reference_tables(logged_events(Warehouse(str(warehouse))), 2),
                           "a standby took over a controller killed with SIGKILL")
        os.kill(standby.pid, signal.SIGTERM)  # the driver alone, as on a service manager's stop
        assert standby.wait(120) == INTERRUPTED, standby_log.read_text()[-3000:]
    finally:
        stop(first)
        if standby is not None:
            stop(standby)
    state, _ = Lease(str(warehouse), "controller", TTL_MS).look()
    assert state.holder is None, "a controller that stopped cleanly gives its lease up"


def test_a_standby_stopped_while_waiting_exits_130_and_writes_nothing(spark: SparkSession, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process (its Spark session is the suite's): SIGTERM, as ``run_job`` takes it. Nothing under the
    warehouse changed, its warm-up included; the thread repeating that warm-up ends with the job."""
    ingest_jsonl(DeltaRsTables(str(tmp_path)), write_jsonl(generate_log(seed=3, size=10).events, tmp_path / "l.jsonl"))
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with holder_process(tmp_path, TTL_MS, renew=False) as holder:
        state, _ = Lease(str(tmp_path), "controller", TTL_MS).look()
        files = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
        scratch = set(Path(tempfile.gettempdir()).glob("kraftlake-warm-up-*"))

        def stop_when_waiting() -> None:
            assert wait_for(lambda: "standby: waiting" in err.getvalue(), 120)
            os.kill(os.getpid(), signal.SIGTERM)

        signaller, errors = in_background(stop_when_waiting)
        # the holder renews nothing: the standby's TTL outlasts its warm-up, however slow, so that it waits
        code = run_job("controller", main, ["--warehouse", str(tmp_path), "--standby", "--no-progress",
                                            "--override", f"kraftlake.controller.lease.ttl.ms={TTL_MS * 10}"])
        signaller.join(30)
        assert not errors
        assert code == INTERRUPTED, err.getvalue()
        assert f"standby: waiting for the controller lease held by pid {holder.pid} " in err.getvalue()
        assert "controller: stopped (SIGTERM)" in err.getvalue() and "Traceback" not in err.getvalue()
        assert not [t for t in threading.enumerate() if t.name == "kraftlake-warm-up"]
        assert Lease(str(tmp_path), "controller", TTL_MS).look()[0] == state
        # its warm-up (a Spark job, both queries' plans over metadata_log, the controller query over a copy of the
        # log's head in a scratch warehouse) before it waited wrote no file either, and left no scratch behind
        assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == files
        assert "warm-up query failed" not in err.getvalue()
        assert set(Path(tempfile.gettempdir()).glob("kraftlake-warm-up-*")) == scratch


@pytest.mark.parametrize("other", ["--once", "--reset"])
def test_a_standby_runs_continuously_only(other: str, capsys: pytest.CaptureFixture) -> None:
    assert run_job("controller", main, ["--warehouse", "/nonexistent", "--standby", other]) == USAGE
    assert capsys.readouterr().err == (f"controller: --standby with {other}: a standby waits to take over a running "
                                       "controller and then runs continuously\n")
