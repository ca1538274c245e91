"""The worker of tests/test_hostile_property.py: one example per line on stdin, one JSON answer per line on
stdout. Each example runs in a child forked for it, under an address-space limit (what the child holds
after the fork, plus the example's memory budget) and a CPU-time limit that kills a runaway; the answer
says what the reader gave, or how the child failed.

A process of its own, so that the forks copy an interpreter that has imported the library but never ran
Spark or a delta-rs runtime (a fork of threads may deadlock).
"""

from __future__ import annotations

import base64
import json
import os
import resource
import signal
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

from kraftlake.codec.bounds import default_limits  # noqa: E402
from kraftlake.codec.logdir import decode_buffer  # noqa: E402
from kraftlake.metadata.rejections import RAW_LIMIT, Rejection  # noqa: E402
from kraftlake.metadata.schemas import registry  # noqa: E402
from kraftlake.metadata.tables import metadata_log_schema, table_arrow_schema  # noqa: E402
from kraftlake.storage import ingest  # noqa: E402
from kraftlake.storage.deltars import DeltaRsTables  # noqa: E402
from kraftlake.storage.tables import events_to_arrow, rejections_to_arrow  # noqa: E402


def address_space() -> int:
    """This process's virtual memory size (VmSize), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def decode(data: bytes) -> dict:
    """The decoder over ``data``: every item an event or a rejection within the buffer, all storable."""
    items = list(decode_buffer(data, "random.log"))
    events = [i for i in items if isinstance(i, dict)]
    rejections = [i for i in items if isinstance(i, Rejection)]
    assert len(events) + len(rejections) == len(items), "an item that is neither an event nor a rejection"
    for r in rejections:
        assert r.position is None or 0 <= r.position <= len(data), r
        assert r.raw is None or len(r.raw) <= RAW_LIMIT, r.raw_length
    offsets = [e["offset"] for e in events]
    assert offsets == sorted(set(offsets)), "offsets not increasing"
    events_to_arrow(events)
    rejections_to_arrow(rejections)
    return {"events": len(events), "rejected": len(rejections)}


def ingest_file(name: str, data: bytes) -> dict:
    """``data`` as the file ``name`` ingested into a new warehouse through delta-rs: what the summary
    says is what the tables hold."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        tables = DeltaRsTables(str(Path(tmp) / "w"))
        summary = ingest.ingest_source(tables, str(path))
        rows = tables.read_arrow("metadata_log", columns=["offset"]).num_rows
        rejected = tables.read_arrow("rejected").num_rows
    assert (rows, rejected) == (summary.records, summary.rejected), (rows, rejected, summary)
    return {"records": summary.records, "rejected": summary.rejected, "kind": summary.kind}


def run(request: dict) -> dict:
    data = base64.b64decode(request["data"])
    if request["kind"] == "decode":
        return decode(data)
    return ingest_file(request["name"], data)


def child(request: dict, answer: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (address_space() + request["memory"], resource.RLIM_INFINITY))
    resource.setrlimit(resource.RLIMIT_CPU, (request["cpu"], resource.RLIM_INFINITY))
    try:
        result = {"ok": run(request)}
    except MemoryError:
        result = {"error": f"MemoryError: more than {request['memory']:,} bytes"}
    except BaseException:  # noqa: BLE001 - the test reports whatever the reader raised
        result = {"error": traceback.format_exc()}
    with os.fdopen(answer, "w") as out:
        out.write(json.dumps(result))
    os._exit(0)


def main() -> None:
    registry(), default_limits(), metadata_log_schema(), table_arrow_schema("rejected")  # loaded once, not per fork
    for line in sys.stdin:
        request = json.loads(line)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            child(request, write)
        os.close(write)
        with os.fdopen(read) as answer:
            text = answer.read()
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            result = {"error": f"killed by {signal.Signals(os.WTERMSIG(status)).name} (CPU-time limit "
                               f"{request['cpu']} s)"}
        else:
            result = json.loads(text) if text else {"error": f"no answer, exit status {os.waitstatus_to_exitcode(status)}"}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
