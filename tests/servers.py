"""Servers the tests start on 127.0.0.1, each in its own process group, stopped by that group's id.

``S3Server`` is moto's S3 (``tests/s3_server.py``); ``SparkCluster`` (a Spark standalone master and
one-core workers) and the process helpers live in ``benchmarks/cluster.py``, which the scale-out bench
uses too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from benchmarks.cluster import SparkCluster, _group_alive, start, stop, wait_for, wait_for_line  # noqa: F401

TESTS = Path(__file__).resolve().parent
# moto accepts any credentials; these exist only so that requests are signed as real clients sign them
ACCESS_KEY, SECRET_KEY, REGION = "kraftlake-test", "kraftlake-test-secret", "us-east-1"


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc): a job's JVM, which outlives a parent killed hard."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError):  # gone meanwhile
                continue
    return found


@dataclass
class S3Server:
    """moto's S3 on 127.0.0.1; ``bucket()`` makes a fresh bucket for one test."""

    process: subprocess.Popen
    port: int
    log: Path

    @classmethod
    def start(cls, folder: Path) -> S3Server:
        log = folder / "s3-server.log"
        process = subprocess.Popen([sys.executable, str(TESTS / "s3_server.py")], stdout=subprocess.PIPE,
                                   stderr=log.open("wb"), start_new_session=True, text=True)
        line = process.stdout.readline()
        assert line.strip().isdigit(), f"the S3 server did not start:\n{log.read_text()[-3000:]}"
        return cls(process, int(line), log)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self, endpoint: str | None = None) -> dict[str, str]:
        """Options reaching this server, or the same objects through ``endpoint`` (a proxy in front of it)."""
        return {"aws_endpoint_url": endpoint or self.endpoint, "aws_access_key_id": ACCESS_KEY,
                "aws_secret_access_key": SECRET_KEY, "aws_region": REGION, "aws_allow_http": "true"}

    def settings(self, endpoint: str | None = None) -> dict[str, str]:
        """The same as ``kraftlake.storage.*`` settings, for a --conf-file."""
        return {f"kraftlake.storage.{k}": v for k, v in self.storage_options(endpoint).items()}

    def conf_file(self, path: Path, endpoint: str | None = None) -> Path:
        path.write_text("".join(f"{k}={v}\n" for k, v in self.settings(endpoint).items()))
        return path

    def bucket(self) -> str:
        name = f"kraftlake-{uuid.uuid4().hex[:12]}"
        pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION, scheme="http",
                          endpoint_override=f"127.0.0.1:{self.port}", allow_bucket_creation=True).create_dir(name)
        return name

    def statuses(self) -> list[int]:
        """HTTP statuses answered so far, from the server's request log."""
        return [int(s) for s in re.findall(r'" (\d{3}) ', self.log.read_text(errors="replace"))]

    def stop(self) -> None:
        stop(self.process)


@dataclass
class FaultProxyServer:
    """``tests/fault_proxy.py`` in front of an ``S3Server``: clients given ``endpoint`` meet the faults its
    schedule deals (``schedule(...)``)."""

    process: subprocess.Popen
    port: int

    @classmethod
    def start(cls, store: S3Server, folder: Path, delay_s: float = 1.0) -> FaultProxyServer:
        log = folder / "fault-proxy.log"
        process = subprocess.Popen([sys.executable, str(TESTS / "fault_proxy.py"), str(store.port), str(delay_s)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("wb"),
                                   start_new_session=True, text=True)
        line = process.stdout.readline()
        assert line.strip().isdigit(), f"the fault proxy did not start:\n{log.read_text()[-3000:]}"
        return cls(process, int(line))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def schedule(self, kind: str, **settings: object) -> dict[str, int]:
        """Deal faults by the schedule ``kind`` from now on (``fault_proxy.schedule_from``); the faults
        dealt so far, by kind."""
        return self._ask({"schedule": kind, **settings})

    def seen(self) -> dict[str, int]:
        return self._ask({})

    def _ask(self, command: dict) -> dict[str, int]:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def stop(self) -> None:
        stop(self.process)


def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    pids.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    return pids


def listening_addresses(pgid: int) -> set[str]:
    """The local addresses (``host:port``) on which any process of group ``pgid`` listens for TCP, read
    from /proc (Linux): a socket's inode in /proc/net/tcp{,6} state 0A (LISTEN) matched with the processes'
    file descriptors. IPv4-mapped IPv6 addresses are given as IPv4."""
    inodes: set[str] = set()
    for pid in _group_pids(pgid):
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except (FileNotFoundError, PermissionError):
            continue
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:
                continue
            host, port = fields[1].split(":")
            raw = bytes.fromhex(host)
            # /proc prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, width // 2, 4))
            if len(raw) == 16 and raw[:12] == b"\0" * 10 + b"\xff\xff":
                raw = raw[12:]
            address = ".".join(str(b) for b in raw) if len(raw) == 4 else \
                ":".join(raw[i:i + 2].hex() for i in range(0, 16, 2))
            found.add(f"{address}:{int(port, 16)}")
    return found
