"""Resident memory of a job's processes, sampled while it runs (Linux /proc): the driver, its JVM and
Spark's Python workers, which are the JVM's children.

Spark's Python workers are forked from one daemon and share much of their memory, so the sum of their
resident sizes counts the shared pages once per worker; ``proportional=True`` sums the proportional set
size instead (each shared page split among its sharers), which is what they hold together.

A JVM's resident size does not say what grows in it: heap pages touched for the first time, the JIT's code
cache and metaspace filling, off-heap buffers. Started with ``NATIVE_MEMORY_TRACKING`` (in
``JAVA_TOOL_OPTIONS``: spark-submit's own driver options stay as they are), it tells them apart:
``native_memory`` asks it through ``jcmd``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from typing import Callable

_PAGE = os.sysconf("SC_PAGE_SIZE")
NATIVE_MEMORY_TRACKING = "-XX:NativeMemoryTracking=summary"  # a few % of the JVM's CPU and memory
# "-  Java Heap (reserved=1048576KB, committed=142336KB)": a category of jcmd's summary; and its total
_CATEGORY = re.compile(r"^-\s+(.+?) \(reserved=\d+KB, committed=(\d+)KB", re.MULTILINE)
_TOTAL = re.compile(r"^Total: reserved=\d+KB, committed=(\d+)KB", re.MULTILINE)


def all_processes() -> dict[int, tuple[int, str, int]]:
    """Every process: pid -> (parent pid, command line, resident bytes)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/statm", "rb") as handle:
                resident = int(handle.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        out[int(entry)] = (ppid, cmdline, resident)
    return out


def family(root: int, processes: dict[int, tuple[int, str, int]]) -> list[int]:
    """``root`` and all its descendants (Spark's Python workers are the JVM's children, not the group's)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in processes.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in processes:
            found.append(pid)
            todo += children.get(pid, [])
    return found


def role(pid: int, cmdline: str, is_driver: Callable[[int, str], bool]) -> str | None:
    """What a process of a Spark job is: its JVM, its Python driver, a Spark Python worker (None: anything
    else, e.g. the launcher's shell)."""
    program = _program(cmdline)
    if program == "java":
        return "driver_jvm"
    if "python" not in program:
        return None
    return "driver_python" if is_driver(pid, cmdline) else "workers"


def proportional_size(pid: int) -> int:
    """The process's proportional set size in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            for line in handle:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def roles_of(root: int, is_driver: Callable[[int, str], bool], proportional: bool = False) -> dict[str, int]:
    """Bytes held by the job under ``root`` by role: the driver's Python, its JVM, Spark's Python workers
    (resident, or proportional: see the module's docstring). Under spark-submit the driver is the JVM's
    child, so a driver measuring itself passes ``job_root(os.getpid())``."""
    processes = all_processes()
    roles = {"driver_python": 0, "driver_jvm": 0, "workers": 0}
    for pid in family(root, processes):
        ppid, cmdline, _ = processes[pid]
        if _program(cmdline) == "java" and processes.get(ppid, (0, "", 0))[1] == cmdline:
            continue  # the JVM forking a Python worker, seen before its exec: the JVM's own pages once more
        kind = role(pid, cmdline, is_driver)
        if kind is not None:
            roles[kind] += proportional_size(pid) if proportional else processes[pid][2]
    return roles


def job_root(pid: int) -> int:
    """The process whose descendants are the job of driver ``pid``: its parent when that is the JVM
    spark-submit started (which also starts the Python workers), else the driver (Spark in-process)."""
    processes = all_processes()
    parent = processes.get(pid, (0, "", 0))[0]
    parent_program = os.path.basename(processes.get(parent, (0, "", 0))[1].split(" ")[0])
    return parent if parent_program == "java" else pid


class PeakMemory:
    """The most each role held at once while the ``with`` block ran, sampled every ``every`` seconds."""

    def __init__(self, sample: Callable[[], dict[str, int]], every: float = 1.0) -> None:
        self.sample, self.every = sample, every
        self.peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            for name, value in self.sample().items():
                self.peak[name] = max(self.peak.get(name, 0), value)
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def jvm_of(root: int) -> int | None:
    """The JVM among ``root`` and its descendants (spark-submit's driver JVM), if one runs."""
    processes = all_processes()
    return next((pid for pid in family(root, processes) if _program(processes[pid][1]) == "java"), None)


def _program(cmdline: str) -> str:
    return os.path.basename(cmdline.split(" ")[0])


def _is_java(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return _program(handle.read().split(b"\0")[0].decode(errors="replace")) == "java"
    except OSError:
        return False


def native_memory(pid: int) -> dict[str, int]:
    """Bytes JVM ``pid`` has committed by Native Memory Tracking's categories ("Java Heap", "Code",
    "Metaspace", "Thread", ...; "Total" for all): empty when it was started without ``NATIVE_MEMORY_TRACKING``,
    is gone, is no JVM, or no ``jcmd`` is found (``$JAVA_HOME/bin``, then the path). Only a JVM is asked: jcmd
    attaches by sending SIGQUIT, which ends most other processes."""
    if not _is_java(pid):
        return {}
    home = os.environ.get("JAVA_HOME")
    jcmd = os.path.join(home, "bin", "jcmd") if home and os.path.exists(os.path.join(home, "bin", "jcmd")) \
        else shutil.which("jcmd")
    if jcmd is None:
        return {}
    try:
        said = subprocess.run([jcmd, str(pid), "VM.native_memory", "summary"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return committed_by_category(said)


def committed_by_category(summary: str) -> dict[str, int]:
    """``jcmd PID VM.native_memory summary``'s committed bytes by category and in total; empty when the text
    holds none (tracking not enabled, the attach failed)."""
    total = _TOTAL.search(summary)
    if total is None:
        return {}
    found = {name: int(kb) * 1024 for name, kb in _CATEGORY.findall(summary)}
    return {**found, "Total": int(total.group(1)) * 1024}
