"""One controller per warehouse: a lease kept in the warehouse, renewed while its holder runs.

Two controllers on one warehouse write the same tables and the same checkpoint; Spark notices only when
both commit a batch, and then both fail. The lease makes the second one stop at its start instead, saying
which process holds the warehouse, and leaves the first untouched. It lives in the warehouse itself, so it
needs no service and works wherever the warehouse's Delta tables do:

- ``_leases/<job>`` is a Delta table without rows. Each commit is an acquisition or a release, with the
  holder (host, pid, start time) in its commit info; its version is the lease's epoch. A candidate
  commits version v+1 on top of the version v it judged free, without retry: a Delta commit is the
  conditional creation of the next log entry (a rename without overwrite on a local disk, a conditional
  PUT or the configured commit lock on an object store, as for every other table), so of two candidates
  exactly one wins.
- ``_leases/<job>/_renewed/<epoch>.json`` holds the holder's last renewal; it rewrites the file every
  third of ``ttl_ms``. Delta ignores folders starting with ``_``.

A lease is free when it was released, when its holder has not renewed it for ``ttl_ms`` (hosts' clocks
must agree within a fraction of it, as NTP keeps them), or at once when its holder ran on this host and
that process is gone: a ``kill -9`` leaves the lease behind, and the restart takes it over without
waiting. On every renewal the holder checks that the epoch is still its own; one that was stalled for
longer than ``ttl_ms`` and taken over learns it lost the lease (``Lease.lost``) and must stop.

A standby (``acquire`` with ``poll_ms``) is a candidate that, instead of stopping, looks again until the
lease is free: it writes nothing meanwhile, so any number may wait, and the commit race above decides
between those that see it free together.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Callable, Iterator, TypeVar

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from kraftlake.storage.deltars import StorageOptions, filesystem, is_local, normalize_root, with_retries_at_most

_KEY = "kraftlake.lease"  # the commit-info entry holding an acquisition or release
_SCHEMA = pa.schema([pa.field("epoch", pa.int64())])  # a Delta table needs a column; it never gets a row
ACQUIRE_ATTEMPTS = 5  # races lost to other candidates before giving up (each loss means someone else holds it)
# Attempts at one read or write of a renewal file on an object store (``_retried``), 0.1 s apart, doubling
STORE_ATTEMPTS = 6
# Retries of the store clients themselves within one of those attempts (pyarrow's for the renewal files,
# delta-rs' when the renewer looks at the lease): a call stays a few seconds long when the store drops every
# connection, against 109 s (pyarrow) and ~25 s (delta-rs) with the 10 of other callers, so a renewer still
# in one when its lease's block ends leaves it soon and the block waits for it. A thread left inside a
# store client holds the process's exit (pyarrow's S3 client waits for its calls) or crashes it (SIGSEGV
# seen once) as the clients are torn down. A renewal that fails is tried again a third of the ttl later.
CLIENT_RETRIES = 2
T = TypeVar("T")
# The leases (path, epoch) a Lease object of this process holds: a lease whose holder is this process
# but that no object holds any more (its release failed, e.g. on a full disk) is free to this process.
_HELD_HERE: set[tuple[str, int]] = set()


def _process_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the process's name (which may hold spaces), from its state
    (field 3) on; None where there is no ``/proc`` or no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2:].decode().split()


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22): with the pid it names one process,
    even after the pid is reused. None where there is no ``/proc``."""
    fields = _process_stat(pid)
    return None if fields is None else fields[19]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Holder:
    """A process that took a lease."""

    host: str
    pid: int
    pid_start: str | None
    started_ms: int

    @classmethod
    def this_process(cls, now_ms: int) -> Holder:
        return cls(socket.gethostname(), os.getpid(), _process_start(os.getpid()), now_ms)

    def is_gone(self) -> bool:
        """Whether the holder is known to have ended: only a process on this host can be looked at."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, someone else's
            pass
        fields = _process_stat(self.pid)
        if fields is None or self.pid_start is None:
            return False
        # a zombie is dead: a SIGKILLed holder whose parent died with it waits for an init that may reap late
        return fields[0] == "Z" or fields[19] != self.pid_start

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}, started {_iso(self.started_ms)}"


@dataclass(frozen=True)
class LeaseState:
    """What the lease looks like now: its epoch (the Delta version), its holder unless it is free by
    release (or was never taken), and the holder's last renewal."""

    epoch: int
    holder: Holder | None
    renewed_ms: int | None


class LeaseHeld(RuntimeError):
    """Another process holds the lease and it has not expired."""

    def __init__(self, job: str, root: str, state: LeaseState, now_ms: int, ttl_ms: int):
        holder = state.holder
        assert holder is not None
        renewed = state.renewed_ms if state.renewed_ms is not None else holder.started_ms
        super().__init__(
            f"another {job} is running on the warehouse {root}: {holder.describe()}, last renewed "
            f"{_iso(renewed)} ({max(now_ms - renewed, 0) / 1000:.0f} s ago). Only one {job} may run per "
            f"warehouse; this one did not start and the running one is untouched. Stop that one first "
            f"(SIGTERM lets it finish cleanly); if it is gone without a trace (another host, killed), its "
            f"lease expires {ttl_ms / 1000:.0f} s after its last renewal and the next start takes it over.")
        self.state = state


class LeaseLost(RuntimeError):
    """Another process took the lease over: its holder must stop writing."""


class Lease:
    """The lease of ``job`` on the warehouse at ``root``; ``clock`` gives seconds since the epoch."""

    def __init__(self, root: str, job: str, ttl_ms: int, clock: Callable[[], float] = time.time,
                 storage_options: StorageOptions = None):
        if ttl_ms <= 0:
            raise ValueError(f"a lease's ttl must be positive, got {ttl_ms} ms")
        self.root = normalize_root(root)
        self.job = job
        self.ttl_ms = ttl_ms
        self.clock = clock
        self.path = f"{self.root}/_leases/{job}"
        self.epoch: int | None = None  # ours, while held
        self.holder: Holder | None = None
        self._lost: str | None = None  # why the renewals stopped, once they did
        self._renew_by: float | None = None  # while held(): the monotonic time the next renewal must end by
        self._renewal_error: Exception | None = None  # the last renewal's failure, if it failed
        self.storage_options = None if is_local(self.root) or not storage_options else dict(storage_options)
        self._client_options = with_retries_at_most(self.storage_options, CLIENT_RETRIES)
        self._filesystem, self._base = filesystem(self.path, self._client_options)
        self._ending = threading.Event()  # set as held()'s block ends: its renewer's store calls are not retried
        self._renewer: threading.Thread | None = None

    @property
    def lost(self) -> str | None:
        """Why this process must stop writing, once it must: the lease was taken over, or (in ``held()``)
        no renewal succeeded for ``ttl_ms``. The latter is judged by the clock, not when a renewal gives
        up: a store that does not answer holds a renewal in its client's retries for minutes, while
        candidates take the lease over ``ttl_ms`` after the last renewal they can read."""
        if self._lost is None and self._renew_by is not None and time.monotonic() > self._renew_by:
            error = "the store has not answered the renewal" if self._renewal_error is None else self._renewal_error
            self._lost = f"the {self.job} lease on {self.root} could not be renewed for {self.ttl_ms} ms: {error}"
        return self._lost

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ---------------------------------------------------------------------------------- looking
    # Neither DeltaTable.is_deltatable nor DeltaTable.history here: delta-rs holds the interpreter's lock in
    # them while the store answers (and while its client retries), which stalls the renewal thread of a
    # holder whose main thread waits on a slow store (measured: 4.2 s of a 12.4 s history() behind a proxy
    # answering every request 2 s late; opening the table and pyarrow's reads let other threads run).
    def _table(self, storage_options: StorageOptions = None) -> DeltaTable:
        try:
            return DeltaTable(self.path, storage_options=storage_options or self.storage_options)
        except TableNotFoundError:
            pass
        try:  # no retry: a creator that lost the race would commit a second creation on top
            DeltaTable.create(self.path, _SCHEMA, mode="ignore", commit_properties=CommitProperties(max_commit_retries=0),
                              storage_options=self.storage_options)
        except CommitFailedError:  # another candidate created it first
            pass
        return DeltaTable(self.path, storage_options=self.storage_options)

    def _commit_info(self, version: int) -> dict:
        """The commit info of ``version``, from its entry in the Delta log."""
        def read() -> bytes:
            with self._filesystem.open_input_stream(f"{self._base}/_delta_log/{version:020d}.json") as stream:
                return stream.read()

        actions = [json.loads(line) for line in self._retried(read).splitlines() if line.strip()]
        return next((action["commitInfo"] for action in actions if "commitInfo" in action), {})

    def look(self, storage_options: StorageOptions = None) -> tuple[LeaseState, DeltaTable]:
        """The lease as its latest commit says, and the table to commit the next one on (which fails if
        anyone committed after the version looked at). ``storage_options``: other than the lease's."""
        table = self._table(storage_options)
        epoch = table.version()
        latest = self._commit_info(epoch)
        decoded = json.loads(latest[_KEY]) if _KEY in latest else {"released": True}
        if decoded.get("released"):
            return LeaseState(epoch, None, None), table
        holder = Holder(**decoded["holder"])
        return LeaseState(epoch, holder, self._renewed(epoch)), table

    def _retried(self, action: Callable[[], T]) -> T:
        """``action()`` (a pyarrow filesystem call), tried again when an object store failed it: pyarrow's
        S3 client gives up at once on some dropped connections (a GET whose answer never came ends in
        INTERNAL_FAILURE), and a renewal that could not be read must not pass for one never written."""
        for attempt in range(STORE_ATTEMPTS - 1):
            try:
                return action()
            except FileNotFoundError:
                raise
            except OSError:
                if is_local(self.root) or (self._ending.is_set() and threading.current_thread() is self._renewer):
                    raise
                time.sleep(0.1 * 2 ** attempt)
        return action()

    def _renewal_file(self, epoch: int) -> str:
        return f"{self._base}/_renewed/{epoch}.json"

    def _renewed(self, epoch: int) -> int | None:
        def read() -> bytes:
            with self._filesystem.open_input_stream(self._renewal_file(epoch)) as stream:
                return stream.read()

        try:
            return int(json.loads(self._retried(read))["renewed_ms"])
        except (FileNotFoundError, ValueError, KeyError):  # not renewed yet, or caught mid-write
            return None

    def is_free(self, state: LeaseState) -> bool:
        holder = state.holder
        if holder is None:
            return True
        if holder == Holder.this_process(holder.started_ms):
            return (self.path, state.epoch) not in _HELD_HERE
        renewed = state.renewed_ms if state.renewed_ms is not None else holder.started_ms
        return self.now_ms() - renewed > self.ttl_ms or holder.is_gone()

    # ---------------------------------------------------------------------------------- changing
    def _commit(self, table: DeltaTable, entry: dict) -> None:
        """Commit ``entry`` as the version after ``table``'s, or raise ``CommitFailedError``."""
        write_deltalake(table, _SCHEMA.empty_table(), mode="append",
                        commit_properties=CommitProperties(custom_metadata={_KEY: json.dumps(entry)},
                                                           max_commit_retries=0))

    def _write_renewal(self, epoch: int) -> None:
        folder = f"{self._base}/_renewed"
        partial = f"{folder}/.{epoch}.json.{os.getpid()}"

        def write() -> None:
            self._filesystem.create_dir(folder, recursive=True)
            with self._filesystem.open_output_stream(partial) as stream:
                stream.write(json.dumps({"renewed_ms": self.now_ms()}).encode())
            self._filesystem.move(partial, self._renewal_file(epoch))

        self._retried(write)

    def acquire(self, poll_ms: int | None = None, stop: Callable[[], bool] = lambda: False,
                waiting: Callable[[Holder], None] | None = None) -> float:
        """Take the lease, or raise ``LeaseHeld`` naming the process that holds it. Returns the
        ``time.monotonic()`` at which the winning attempt began: the renewal written then is no older.

        With ``poll_ms`` (a standby) a held lease is looked at again every ``poll_ms`` until it is free
        (released, expired, or its holder on this host gone) or ``stop()`` says to give up, which raises
        ``LeaseHeld`` as well; ``waiting`` is told each holder waited behind, once."""
        waited_behind: Holder | None = None
        while True:
            try:
                return self._try_acquire()
            except LeaseHeld as held:
                if poll_ms is None or stop():
                    raise
                if waiting is not None and held.state.holder != waited_behind:
                    waiting(held.state.holder)
                waited_behind = held.state.holder
            time.sleep(poll_ms / 1000)

    def _try_acquire(self) -> float:
        for _ in range(ACQUIRE_ATTEMPTS):
            began = time.monotonic()
            state, table = self.look()
            if not self.is_free(state):
                raise LeaseHeld(self.job, self.root, state, self.now_ms(), self.ttl_ms)
            holder = Holder.this_process(self.now_ms())
            try:
                self._commit(table, {"holder": asdict(holder)})
                epoch = state.epoch + 1
            except CommitFailedError:
                # another candidate committed first, or this one did and the store's answer was lost (a
                # connection dropped after the write: the client's retry then finds the entry taken)
                state, _ = self.look()
                if state.holder != holder:
                    continue
                epoch = state.epoch
            self.epoch, self.holder, self._lost = epoch, holder, None
            _HELD_HERE.add((self.path, self.epoch))
            self._write_renewal(self.epoch)
            try:  # the previous holder's
                self._retried(lambda: self._filesystem.delete_file(self._renewal_file(epoch - 1)))
            except FileNotFoundError:
                pass
            return began
        state, _ = self.look()
        if state.holder is not None:
            raise LeaseHeld(self.job, self.root, state, self.now_ms(), self.ttl_ms)
        raise RuntimeError(f"could not take the {self.job} lease on {self.root}: other candidates committed "
                           f"first {ACQUIRE_ATTEMPTS} times in a row; start again")

    def renew(self) -> None:
        """Record that the holder is alive; ``LeaseLost`` if another process took the lease over."""
        assert self.epoch is not None, "renew() before acquire()"
        state, _ = self.look(self._client_options)
        if state.epoch != self.epoch:
            taker = "released" if state.holder is None else f"taken over by {state.holder.describe()}"
            raise LeaseLost(f"the {self.job} lease on {self.root} was {taker} (epoch {state.epoch}, ours was "
                            f"{self.epoch}): this process was not heard from for more than {self.ttl_ms} ms")
        self._write_renewal(self.epoch)

    def release(self) -> None:
        """Give the lease up (nothing if it was lost): the next start takes it at once."""
        if self.epoch is None:
            return
        try:
            # a lease lost is not looked at: the store may be the reason, and would hold the stop in retries
            state, table = self.look() if self.lost is None else (None, None)
            if state is not None and state.epoch == self.epoch:
                try:
                    self._commit(table, {"released": True, "by": asdict(self.holder)})
                except CommitFailedError:
                    pass  # taken over meanwhile: nothing of ours to give up
        finally:
            _HELD_HERE.discard((self.path, self.epoch))
            self.epoch, self._renew_by = None, None

    @contextmanager
    def held(self, poll_ms: int | None = None, waiting: Callable[[Holder], None] | None = None) -> Iterator[Lease]:
        """Acquire (waiting for it with ``poll_ms``, as ``acquire`` says), renew every ``ttl_ms / 3`` in a
        background thread while the block runs, release.

        The block must check ``lost`` now and then: it says why once the lease was taken over, or once no
        renewal succeeded for ``ttl_ms`` (storage unreachable or not answering, disk full); the thread
        then stops renewing.
        """
        stop = self._ending = threading.Event()

        def renew_until_stopped() -> None:
            while not stop.wait(self.ttl_ms / 3000) and self.lost is None:
                # the renewal's time is written after this instant: candidates' expiry comes no sooner
                attempt = time.monotonic()
                try:
                    self.renew()
                    if not stop.is_set():
                        self._renew_by, self._renewal_error = attempt + self.ttl_ms / 1000, None
                except LeaseLost as exc:
                    self._lost = str(exc)
                except Exception as exc:  # storage trouble: retried until the lease would have expired
                    self._renewal_error = exc

        renewer = self._renewer = threading.Thread(target=renew_until_stopped, name=f"kraftlake-lease-{self.job}",
                                                   daemon=True)
        try:  # a SIGTERM may land inside acquire() once the lease is taken: it is given back all the same
            self._renew_by = self.acquire(poll_ms, waiting=waiting) + self.ttl_ms / 1000
            renewer.start()
            yield self
        finally:
            stop.set()
            if renewer.ident is not None:  # one in a store call gets out of it within a call's retries
                renewer.join(self.ttl_ms / 1000)
            try:
                self.release()
            except Exception as exc:  # the lease then expires by itself (at once for a restart on this host)
                # one line: an object store's error chains its causes over many, which the job's own error says
                print(f"[lease] could not release the {self.job} lease on {self.root}: {str(exc).splitlines()[0]}; "
                      f"it expires {self.ttl_ms} ms after its last renewal, at once for a restart on this host",
                      file=sys.stderr)
