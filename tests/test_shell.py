"""The metadata shell: the image at an offset or a time, browsed like kafka-metadata-shell.

The warehouse's image at offset N must be the core replay of the Kafka log itself (read from its segment
files, not from the warehouse) cut after N, every node of it; at the log's end it must also agree with
the fixture's independently computed image. No Spark: the shell reads through delta-rs.
"""

from __future__ import annotations

import io
import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kraftlake.cli import shell as shell_job
from kraftlake.cli.launcher import USAGE, needs_spark, run_job
from kraftlake.cli.shell import NoSuchNode, Shell
from kraftlake.codec.logdir import read_partition_dir
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.image.nodes import image_tree
from kraftlake.image.replay import replay
from kraftlake.metadata import uuids
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.ingest import ingest_source

FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kafka-logs" / "three-brokers-restarts"
LOG = FIXTURE / "__cluster_metadata-0"


@pytest.fixture(scope="module")
def log_events() -> list[dict]:
    return list(read_partition_dir(LOG))


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shell") / "warehouse"
    summary = ingest_source(DeltaRsTables(str(root)), str(LOG))
    assert summary.rejected == 0
    return root


def core_image(events: list[dict], offset: int) -> ClusterImage:
    """The log's records up to ``offset``, replayed one by one."""
    image = ClusterImage()
    for event in events:
        if event["offset"] > offset:
            break
        replay(image, event)
    return image


def run(warehouse: Path, capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = run_job("shell", shell_job.main, ["--warehouse", str(warehouse), *args])
    out, err = capsys.readouterr()
    return code, out, err


def every_leaf(tree: dict, at: str = "") -> dict[str, str]:
    found = {}
    for name, node in tree.items():
        found.update(every_leaf(node, f"{at}/{name}") if isinstance(node, dict) else {f"{at}/{name}": node})
    return found


def every_path(tree: dict, at: str = "") -> list[str]:
    """Every directory and leaf under ``tree``."""
    return [p for name, node in tree.items() for p in [f"{at}/{name}"] + (
        every_path(node, f"{at}/{name}") if isinstance(node, dict) else [])]


def cut_points(events: list[dict]) -> list[int]:
    """Offsets across the log, and those right before and at the first fencing and the first ISR change."""
    offsets = [e["offset"] for e in events]
    fence = next(e["offset"] for e in events if e["type"] == "FenceBrokerRecord" or (
        e["type"] == "BrokerRegistrationChangeRecord" and e["data"].get("Fenced") == 1))
    shrink = next(e["offset"] for e in events if e["type"] == "PartitionChangeRecord" and e["data"].get("Isr"))
    return sorted({offsets[len(offsets) * k // 5] for k in range(5)} | {fence - 1, fence, shrink - 1, shrink})


def test_the_image_at_an_offset_is_the_core_replay_of_the_log_cut_there(
        warehouse: Path, log_events: list[dict], capsys: pytest.CaptureFixture) -> None:
    points = cut_points(log_events)
    assert len(points) >= 7
    for offset in points:
        expected = every_leaf(image_tree(core_image(log_events, offset)))
        code, out, err = run(warehouse, capsys, "--offset", str(offset), "-c", "find /")
        assert code == 0, err
        found = out.splitlines()
        leaves = [p for p in found if p in expected]
        assert set(leaves) == set(expected), offset
        assert sorted(found) == sorted(["/", *every_path(image_tree(core_image(log_events, offset)))]), offset
        code, out, err = run(warehouse, capsys, "--offset", str(offset), "-c", "cat " + " ".join(leaves))
        assert out.splitlines() == [expected[p] for p in leaves], offset
        assert f"after offset {offset} " in err
    states = {o: " ".join(every_leaf(image_tree(core_image(log_events, o))).values()) for o in points}
    assert any("fenced=true" in s for s in states.values()) and any("fenced=false" in s for s in states.values())


def test_at_the_logs_end_it_agrees_with_the_independent_image(warehouse: Path, capsys: pytest.CaptureFixture) -> None:
    oracle = json.loads((FIXTURE / "expected-image.json").read_text())
    code, out, _ = run(warehouse, capsys, "-c", "ls /brokers", "-c", "cat /brokers/*")
    assert code == 0
    lines = out.splitlines()
    assert lines[:3] == sorted(oracle["brokers"])
    for line in lines[3:]:
        broker = oracle["brokers"][re.search(r"\(id=(\d+),", line).group(1)]
        assert f"epoch={broker['epoch']}," in line and f"fenced={str(broker['fenced']).lower()}," in line
        assert f"incarnationId={uuids.normalize(broker['incarnation'])}," in line

    code, out, _ = run(warehouse, capsys, "-c", "ls /topics")
    assert out.splitlines() == sorted(oracle["topics"].values())
    paths = [f"/topics/{p['topic']}/id /topics/{p['topic']}/{p['partition']}" for p in oracle["partitions"]]
    code, out, _ = run(warehouse, capsys, "-c", "cat " + " ".join(paths))
    lines = out.splitlines()
    assert len(lines) == 2 * len(oracle["partitions"]) == 2 * 52
    for p, topic_id, line in zip(oracle["partitions"], lines[::2], lines[1::2]):
        assert topic_id == uuids.normalize(p["topic_id"])
        for field, value in (("replicas", p["replicas"]), ("isr", p["isr"]), ("addingReplicas", p["adding"]),
                             ("removingReplicas", p["removing"])):
            assert f"{field}=[{', '.join(map(str, value))}]" in line
        assert f"leader={p['leader']}," in line and f"leaderEpoch={p['leader_epoch']}," in line
        assert f"partitionEpoch={p['partition_epoch']})" in line


def test_a_time_is_the_image_after_the_last_event_at_or_before_it(
        warehouse: Path, log_events: list[dict], capsys: pytest.CaptureFixture) -> None:
    middle = log_events[len(log_events) // 2]
    later = next(e for e in log_events if e["timestamp"] > middle["timestamp"])
    last = max(e["offset"] for e in log_events if e["offset"] < later["offset"])
    moment = datetime.fromtimestamp(middle["timestamp"] / 1000, timezone.utc).isoformat()
    code, by_time, err = run(warehouse, capsys, "--time", moment, "-c", "cat /topics/*/* /brokers/*")
    assert code == 0 and f"after offset {last} " in err
    assert run(warehouse, capsys, "--offset", str(last), "-c", "cat /topics/*/* /brokers/*")[1] == by_time


def test_commands_and_mistakes(warehouse: Path, capsys: pytest.CaptureFixture) -> None:
    tree = {"topics": {"orders": {"name": "orders", "id": "x", "0": "p0", "1": "p1"}}, "brokers": {}}
    out = io.StringIO()
    shell = Shell(tree, out)
    for line in ("cd topics/orders", "pwd", "ls", "cat 1", "cd ..", "find orders", "cd", "pwd", "ls /topics/*/?"):
        assert shell.run(line)
    assert out.getvalue().splitlines() == [
        "/topics/orders", "name", "id", "0", "1", "p1",
        "/topics/orders", "/topics/orders/name", "/topics/orders/id", "/topics/orders/0", "/topics/orders/1",
        "/", "0", "1"]
    for line, says in (("cat /topics", "is a directory"), ("cd /topics/orders/0", "not a directory"),
                       ("ls /nope", "no such node"), ("rm /topics", "no such command")):
        with pytest.raises(NoSuchNode, match=says):
            shell.run(line)
    assert not shell.run("exit")

    code, out, err = run(warehouse, capsys, "-c", "ls /brokers", "-c", "cat /brokers/9", "-c", "ls /topics")
    assert (code, out.splitlines()) == (USAGE, ["1", "2", "3"])  # stopped at the mistake
    assert err.splitlines()[-1] == "shell: /brokers/9: no such node"
    assert run(warehouse, capsys, "--time", "yesterday")[0] == USAGE
    assert not needs_spark("shell", ["--warehouse", "w"])


def test_commands_from_stdin(warehouse: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("cd /topics\nls\ncat nope\npwd\nexit\nls /\n"))
    code, out, err = run(warehouse, capsys, "--offset", "0")
    assert code == 0
    assert out.splitlines() == ["/topics"]  # offset 0: no topic yet; nothing after exit
    assert "shell: nope: no such node" in err
