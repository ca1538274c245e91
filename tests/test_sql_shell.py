"""The SQL shell on a real terminal (a pseudo-terminal), started as documented: ./spark-submit.sh jobs/sql.py."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import subprocess
import termios
import time
from pathlib import Path

import pytest

from kraftlake.storage import Warehouse
from kraftlake.storage.ingest import ingest_source
from servers import child_pids, stop, wait_for

REPO = Path(__file__).resolve().parent.parent
SHUTDOWN = "single-broker-shutdown"


class Terminal:
    """A process on a pseudo-terminal that is its controlling terminal, so that Ctrl-C is a SIGINT to it."""

    def __init__(self, command: list[str]) -> None:
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(command, cwd=REPO, stdin=slave, stdout=slave, stderr=slave,
                                        start_new_session=True,
                                        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(slave)
        self.seen = b""

    def wait_for(self, pattern: str, timeout: float = 300) -> str:
        """The text up to the first match of ``pattern`` after what earlier calls consumed."""
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern.encode(), self.seen)
            if match:
                text, self.seen = self.seen[:match.end()], self.seen[match.end():]
                return text.decode(errors="replace")
            assert time.monotonic() < deadline and self.process.poll() is None, (
                f"no {pattern!r} (exit {self.process.poll()}):\n{self.seen.decode(errors='replace')[-3000:]}")
            if select.select([self.master], [], [], 0.2)[0]:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # the process is gone: no more to read
                    pass

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())


@pytest.mark.slow
def test_the_shell_edits_continues_cancels_remembers_and_quits(fixtures_dir, tmp_path) -> None:  # noqa: ANN001
    root = str(tmp_path / "w")
    ingest_source(Warehouse(root), str(fixtures_dir / SHUTDOWN / "__cluster_metadata-0"))
    records = sum(json.loads((fixtures_dir / SHUTDOWN / "expected-image.json").read_text())["record_counts"].values())
    history = tmp_path / "history"
    shell = Terminal(["./spark-submit.sh", "jobs/sql.py", "--warehouse", root,
                      "--override", f"kraftlake.sql.history.file={history}"])
    try:
        shell.wait_for(r"kraftlake> ")
        processes = [shell.process.pid, *child_pids(shell.process.pid)]  # Python and its JVM
        shell.type("SELECT count(*)\n")
        shell.wait_for(r"\n +-> ")  # the statement goes on
        shell.type("  AS n FROM metadata_log;\n")
        assert f"| {records} |" in shell.wait_for(r"1 row\(s\) in [0-9.]+ s")

        shell.type("SELECT sum(id % 7) FROM range(10000000000000);\n")
        shell.wait_for(r"\[Stage \d+:")  # running: Spark's progress bar is on the terminal
        shell.type("\x03")  # Ctrl-C
        shell.wait_for(r"sql: cancelled")
        shell.wait_for(r"kraftlake> ")

        shell.type("SELECT 'still' || ' here' AS s;\n")
        shell.wait_for(r"\| still here \|")
        shell.wait_for(r"kraftlake> ")
        shell.type("\x1b[A\n")  # arrow up: the last statement again, from readline's history
        shell.wait_for(r"\| still here \|")
        shell.wait_for(r"kraftlake> ")
        shell.type("\x04")  # Ctrl-D
        assert shell.process.wait(120) == 0
    finally:
        stop(shell.process)
        os.close(shell.master)
    assert history.read_text().splitlines()[-3:] == [
        "SELECT count(*)   AS n FROM metadata_log;", "SELECT sum(id % 7) FROM range(10000000000000);",
        "SELECT 'still' || ' here' AS s;"]
    assert oct(history.stat().st_mode & 0o777) == "0o600"
    assert len(processes) >= 2 and wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in processes), 60)

