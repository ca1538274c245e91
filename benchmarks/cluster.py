"""Processes started in groups of their own and stopped by the group's id, and a Spark standalone cluster of
one-core workers on 127.0.0.1 made of them: what the scale-out bench (``scale_out``) and the tests
(``tests/servers.py``) start. A worker starts its executors, and they their Python workers, inside its
group, so stopping a worker's group stops everything it ran.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent


def start(command: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """``command`` in a process group of its own (its id is the process's), output to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)


def stop(process: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM the process's group, SIGKILL what is left after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        if not _group_alive(process.pid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(condition: Callable[[], bool], timeout: float, every: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return condition()


def wait_for_line(log: Path, pattern: str, process: subprocess.Popen, timeout: float) -> re.Match:
    found: list[re.Match] = []

    def seen() -> bool:
        assert process.poll() is None, f"{process.args[:3]} exited {process.returncode}:\n{log.read_text()[-3000:]}"
        match = re.search(pattern, log.read_text(errors="replace")) if log.exists() else None
        if match:
            found.append(match)
        return match is not None

    assert wait_for(seen, timeout), f"no line matching {pattern!r} within {timeout} s:\n{log.read_text()[-3000:]}"
    return found[0]


def launcher_free_environ() -> dict[str, str]:
    """This process's environment without what spark-submit sets for the driver it starts (SPARK_HOME, a
    PYTHONPATH of zips inside it...): inherited by a launcher started from such a driver (the bench under
    ``./spark-submit.sh``), they would send it looking for Spark inside a zip."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_")) and k != "PYTHONPATH"}


@dataclass
class SparkCluster:
    """A standalone master and ``workers`` one-core workers, all on 127.0.0.1 (web UIs too)."""

    spark_home: Path
    folder: Path
    workers: int = 2
    master: subprocess.Popen | None = None
    worker_processes: list[subprocess.Popen] = field(default_factory=list)
    url: str = ""

    def env(self) -> dict[str, str]:
        # SPARK_LOCAL_IP: every daemon and web UI binds 127.0.0.1, not every interface
        return {**launcher_free_environ(), "SPARK_HOME": str(self.spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(self.folder), "PYSPARK_PYTHON": sys.executable,
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}  # no REST server on a fixed port

    def _class(self, name: str, *args: str) -> list[str]:
        return [str(self.spark_home / "bin" / "spark-class"), name, *args]

    def start(self) -> SparkCluster:
        log = self.folder / "master.log"
        self.master = start(self._class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                        "--port", "0", "--webui-port", "0"), log, self.env())
        port = wait_for_line(log, r"Starting Spark master at spark://127\.0\.0\.1:(\d+)", self.master, 120).group(1)
        self.url = f"spark://127.0.0.1:{port}"
        for index in range(self.workers):
            work = self.folder / f"worker-{index}"
            work.mkdir()
            worker_log = self.folder / f"worker-{index}.log"
            self.worker_processes.append(start(self._class(
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                "--cores", "1", "--memory", "1g", "--work-dir", str(work), self.url), worker_log, self.env()))
        for index, worker in enumerate(self.worker_processes):
            wait_for_line(self.folder / f"worker-{index}.log", r"Successfully registered with master", worker, 120)
        return self

    def stop(self) -> None:
        for process in [*self.worker_processes, self.master]:
            if process is not None:
                stop(process)

    def submit_command(self, job: str, *args: str, conf: tuple[str, ...] = ()) -> list[str]:
        """``./spark-submit.sh`` of ``jobs/<job>`` to this cluster, its driver on 127.0.0.1 too, with ``--conf``
        settings ``conf`` (``key=value``)."""
        return ["./spark-submit.sh", "--master", self.url, "--conf", "spark.driver.host=127.0.0.1",
                "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.executor.memory=1g",
                "--conf", f"spark.sql.shuffle.partitions={self.workers}",  # one per executor core
                *sum((["--conf", c] for c in conf), []), f"jobs/{job}", *args]

    def submit(self, job: str, *args: str, err: Path, conf: tuple[str, ...] = (),
               timeout: float | None = None) -> tuple[str, float]:
        """Run ``jobs/<job>`` on this cluster to its exit (``submit_command``), its stderr into the file ``err``;
        (its stdout, seconds from submission to exit). A job that fails raises, with the end of its output:
        the bench and the tests alike must stop there rather than measure or compare what it did not write."""
        began = time.monotonic()
        with err.open("wb") as stderr:
            done = subprocess.run(self.submit_command(job, *args, conf=conf), cwd=REPO, env=self.submit_env(),
                                  stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=timeout)
        seconds = time.monotonic() - began
        if done.returncode != 0:
            raise RuntimeError(f"{job} on {self.workers} worker(s) ended with exit code {done.returncode}; its stdout "
                               f"ends:\n{done.stdout[-2000:]}\nits stderr ({err}) ends:\n"
                               f"{err.read_text(errors='replace')[-4000:]}")
        return done.stdout, seconds

    @staticmethod
    def submit_env() -> dict[str, str]:
        # the driver's own ports (block manager, ...) on 127.0.0.1 too
        return {**launcher_free_environ(), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable}
