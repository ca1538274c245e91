"""``jobs/quorum.py describe``: kafka-metadata-quorum.sh's fields from the quorum tables or, for a real
log without quorum traffic, from the log itself."""

from __future__ import annotations

import subprocess
import sys

from kraftlake.storage.ingest import ingest_source
from kraftlake.raft.describe import LogView, format_replication, format_status, replication, status
from kraftlake.storage import Warehouse
from streaming_helpers import REPO_ROOT, controller_env
from test_quorum_history import RESTARTS, epochs_from_batch_headers

NO_LOG = LogView(None, None, None, None)


def state(rid, st, epoch, hw=0, voters=(1, 2, 3), target=None, offset=0):
    return {"replica_id": rid, "state": st, "leader_epoch": epoch, "high_watermark": hw, "current_voters": list(voters),
            "target_voters": target, "offset": offset}


def view(leader, epoch, rid, status_, end, lag, lag_ms, reassignment=None, offset=0):
    return {"leader_id": leader, "leader_epoch": epoch, "replica_id": rid, "status": status_, "log_end_offset": end,
            "lag": lag, "lag_time_ms": lag_ms, "reassignment": reassignment, "offset": offset}


STATES = [state(1, "follower", 7), state(2, "leader", 7, hw=230, target=[1, 2, 4]), state(3, "follower", 7),
          state(4, "follower", 7), state(9, "leader", 5, hw=100)]  # 9 led epoch 5 and never learned of 7
REPLICAS = [view(2, 7, 2, "Leader", 234, 0, 0), view(2, 7, 1, "Follower", 230, 4, 10),
            view(2, 7, 3, "Follower", 200, 34, 15, "Removing"), view(2, 7, 4, "Observer", 224, 10, 12, "Adding"),
            view(9, 5, 9, "Leader", 100, 0, 0)]


def test_status_is_the_view_of_the_leader_of_the_highest_epoch():
    assert status(STATES, REPLICAS, NO_LOG) == [
        ("LeaderId", 2), ("LeaderEpoch", 7), ("HighWatermark", 230), ("MaxFollowerLag", 34),
        ("MaxFollowerLagTimeMs", 15), ("CurrentVoters", [1, 2, 3]), ("CurrentObservers", [4]),
        ("TargetVoters", [1, 2, 4])]
    text = format_status(status(STATES, REPLICAS, NO_LOG))
    assert "LeaderId:               2\n" in text and "TargetVoters:           [1, 2, 4]" in text


def test_replication_leader_first_then_followers_then_observers():
    rows = replication(STATES, REPLICAS, NO_LOG)
    assert [(r["ReplicaId"], r["LogEndOffset"], r["Lag"], r["LagTimeMs"], r["Status"]) for r in rows] == [
        (2, 234, 0, 0, "Leader"), (1, 230, 4, 10, "Follower"), (3, 200, 34, 15, "Follower (Removing)"),
        (4, 224, 10, 12, "Observer (Adding)")]
    lines = format_replication(rows).splitlines()
    assert lines[0].split() == ["ReplicaId", "LogEndOffset", "Lag", "LagTimeMs", "Status"]
    assert lines[1].split() == ["2", "234", "0", "0", "Leader"]


def test_during_an_election_there_is_no_leader_and_replication_shows_the_last_leader_view():
    states = [state(1, "candidate", 8, hw=230), state(2, "unattached", 8, hw=230), state(3, "follower", 7, hw=229)]
    fields = dict(status(states, REPLICAS, NO_LOG))
    assert (fields["LeaderId"], fields["LeaderEpoch"], fields["HighWatermark"], fields["Candidates"]) == (-1, 8, 230, [1])
    assert [r["ReplicaId"] for r in replication(states, REPLICAS, NO_LOG)] == [2, 1, 3, 4]


def test_a_real_log_without_traffic_is_described_from_its_records(fixtures_dir, tmp_path):
    warehouse = Warehouse(str(tmp_path / "w"), engine="delta-rs")
    ingest_source(warehouse, str(fixtures_dir / RESTARTS))
    headers = epochs_from_batch_headers((fixtures_dir / RESTARTS / "00000000000000000000.log").read_bytes())
    last_epoch = max(headers)
    end = headers[last_epoch][0] + headers[last_epoch][1]
    out = subprocess.run([sys.executable, "jobs/quorum.py", "--warehouse", str(tmp_path / "w"), "describe", "--status"],
                         cwd=REPO_ROOT, env=controller_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    fields = dict(line.split(":", 1) for line in out.stdout.splitlines())
    # a one-broker cluster: broker 1 is the only voter and leads every epoch
    assert {k: v.strip() for k, v in fields.items() if k in ("LeaderId", "LeaderEpoch", "HighWatermark", "CurrentVoters")} \
        == {"LeaderId": "1", "LeaderEpoch": str(last_epoch), "HighWatermark": str(end), "CurrentVoters": "[1]"}
    missing = subprocess.run([sys.executable, "jobs/quorum.py", "--warehouse", str(tmp_path / "none"), "describe",
                              "--replication"], cwd=REPO_ROOT, env=controller_env(), capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and "ingest a log first" in missing.stderr


def test_the_log_directorys_meta_properties_is_kept_where_the_cluster_id_is(fixtures_dir, tmp_path):
    """Kafka keeps the cluster id in each log directory's meta.properties, beside __cluster_metadata-0."""
    import shutil

    for name, text in (("good", "#\nnode.id=1\nversion=1\ncluster.id=5L6g3nShT-eMCtK--X86sw\n"),
                       ("bad", "node.id=1\nversion=1\n")):
        source = tmp_path / name / "__cluster_metadata-0"
        shutil.copytree(fixtures_dir / "single-broker-shutdown" / "__cluster_metadata-0", source)
        (source.parent / "meta.properties").write_text(text)
        warehouse = Warehouse(str(tmp_path / f"w-{name}"), engine="delta-rs")
        ingest_source(warehouse, str(source))
        kept = [r for r in warehouse.read_arrow("quorum_files").to_pylist() if r["kind"] == "meta.properties"]
        rejected = [r["reason"] for r in warehouse.read_arrow("rejected").to_pylist()]
        if name == "good":
            assert [(r["file"], r["content"]) for r in kept] == [(str(source.parent / "meta.properties"), text)]
            assert rejected == []
        else:
            assert kept == [] and len(rejected) == 1 and "no cluster.id" in rejected[0]


def test_quorum_files_beside_a_log_are_stored_and_a_bad_one_is_rejected(fixtures_dir, tmp_path):
    import shutil

    source = tmp_path / "__cluster_metadata-0"
    shutil.copytree(fixtures_dir / "single-broker-shutdown" / "__cluster_metadata-0", source)
    (source / "leader-epoch-checkpoint").write_text("0\n2\n1 0\n3 120\n")
    warehouse = Warehouse(str(tmp_path / "w"), engine="delta-rs")
    ingest_source(warehouse, str(source))
    rows = {r["kind"]: r for r in warehouse.read_arrow("quorum_files").to_pylist()}
    # the fixture's quorum-state: {"leaderId":1,"leaderEpoch":1,"votedId":-1,...,"currentVoters":[{"voterId":1}]}
    state = rows["quorum-state"]
    assert (state["leader_id"], state["leader_epoch"], state["voted_id"], state["current_voters"]) == (1, 1, -1, [1])
    assert rows["leader-epoch-checkpoint"]["epochs"] == [{"epoch": 1, "start_offset": 0},
                                                         {"epoch": 3, "start_offset": 120}]
    bad = tmp_path / "bad" / "__cluster_metadata-0"
    shutil.copytree(fixtures_dir / "single-broker-shutdown" / "__cluster_metadata-0", bad)
    (bad / "leader-epoch-checkpoint").write_text("0\n3\n1 0\nbroken\n")
    other = Warehouse(str(tmp_path / "w2"), engine="delta-rs")
    ingest_source(other, str(bad))
    rejected = other.read_arrow("rejected").to_pylist()
    assert [(r["source"], "line 4" in r["reason"]) for r in rejected] == [(str(bad / "leader-epoch-checkpoint"), True)]
    assert other.read_arrow("metadata_log").num_rows == warehouse.read_arrow("metadata_log").num_rows  # log kept
