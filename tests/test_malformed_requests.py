"""Malformed requests never crash anything (property tests over ``malformed.nasty_event``).

Every request type the controller decides (``controller.dispatch``) and every message the quorum's
replicas handle (``raft.replica``), with fields missing, extra, out of range, of the wrong type or
inconsistent with each other and with the cluster. Each one either is refused where events come in
(``validate_event``: a ``rejected`` row with Kafka's error name) or reaches the core, where it gets Kafka's
answer in ``responses`` or a ``rejected`` row; the rows fit their tables; and the next, well-formed
request is still answered. The same through the JSON lines and Avro ingest paths, file by file, and
once through the Spark job.
"""

from __future__ import annotations

import base64
import json
import random
import tempfile
from pathlib import Path

import fastavro
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller_scenarios import RequestLog, new_topic
from malformed import Known, nasty_event
from streaming_helpers import logged_events, run_controller, warehouse_tables, reference_tables
from kraftlake.codec import events as events_mod
from kraftlake.codec.events import EventError, json_bytes, validate_event
from kraftlake.controller.dispatch import BROKER_REQUESTS, PARTITION_REQUESTS, TOPIC_REQUESTS
from kraftlake.controller.shards import ShardState, expand, merged_responses, replay_log, routes, step
from kraftlake.metadata.errors import error_code, error_name
from kraftlake.metadata.schemas import QUORUM_TRAFFIC, StructSpec, registry
from kraftlake.raft.replica import Replica, replay_quorum
from kraftlake.sim.quorum import DRAFT_BOOTSTRAP_MIX, SimConfig, simulate
from kraftlake.storage import DeltaRsTables, Warehouse
from kraftlake.storage.ingest import ingest_source
from kraftlake.storage.tables import rows_to_arrow, rows_to_events
from kraftlake.image.cluster_image import ClusterImage

SHARDS = 2
START_MS = 1_763_580_000_000
CONTROLLER_TYPES = sorted({*BROKER_REQUESTS, *TOPIC_REQUESTS, *PARTITION_REQUESTS})
QUORUM_TYPES = sorted(QUORUM_TRAFFIC)
INTAKE_ERRORS = {"INVALID_REQUEST", "INVALID_RECORD", "UNSUPPORTED_VERSION"}
ADMIN = -1
FAST = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FILES = settings(max_examples=6, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])


# --- the base cluster and quorum the requests arrive at ----------------------------------------------------

def _base_log() -> tuple[list[dict], Known]:
    log = RequestLog(first_offset=0, start_ms=START_MS)
    log.add("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": 19})
    epochs = {b: log.register(b, rack="abc"[b - 1]) for b in (1, 2, 3)}
    for b in (1, 2, 3):
        log.heartbeat(b, epochs[b])
    log.create_topics(new_topic("t0", assignments=[[1, 2, 3], [2, 3, 1]]), new_topic("t1", assignments=[[3, 1]]))
    events = [{**validate_event(line), "offset": i, "source": None, "position": None}
              for i, line in enumerate(log.lines)]
    tables, _ = replay_log(events, SHARDS)
    ids = {row["name"]: row["topic_id"] for row in tables["topics"].values()}
    return events, Known(ids=[1, 2, 3], epochs=sorted(epochs.values()), epoch_of=epochs, topics=sorted(ids),
                         topic_ids=[ids[n] for n in sorted(ids)])


BASE_EVENTS, KNOWN = _base_log()
NEXT_OFFSET = len(BASE_EVENTS)
NOW = BASE_EVENTS[-1]["timestamp"] + 100


def _base_states() -> list[bytes]:
    states = [ShardState(ClusterImage()) for _ in range(SHARDS)]
    for shard in range(SHARDS):
        step(shard, SHARDS, states[shard], [e for e in BASE_EVENTS if shard in routes(e, SHARDS)])
    return [s.to_bytes() for s in states]


BASE_STATES = _base_states()
# voters 1-3 and observer 4, with voter changes, crashes and resignations: every message type occurs, and
# the replicas end as leader (2), followers and one down (3)
QUORUM = simulate(4, SimConfig(voters=3, observers=1, alter_every_ms=1500, crash_every_ms=2000, resign_every_ms=1500,
                               duration_ms=6000))
QUORUM_END = max(e["timestamp"] for e in QUORUM.traffic)
# the KIP-595 draft's messages (ADR 0012) occur in its bootstrapping example
DRAFT_TRAFFIC = simulate(1, DRAFT_BOOTSTRAP_MIX).traffic
QUORUM_KNOWN = Known(
    ids=[1, 2, 3, 4], epochs=sorted({r.node.epoch for r in QUORUM.replicas.values()}),
    records=[p["Records"] for e in QUORUM.traffic if e["type"] == "FetchResponse"
             for t in e["data"]["Responses"] for p in t["Partitions"] if p["Records"]][:5])


def heartbeat(offset: int) -> dict:
    """A well-formed request after the malformed one: broker 1's heartbeat."""
    return {**validate_event({"type": "BrokerHeartbeatRequest", "version": 1, "timestamp": NOW + 10, "data": {
        "BrokerId": 1, "BrokerEpoch": KNOWN.epochs[0], "CurrentMetadataOffset": offset - 1}}),
            "offset": offset, "source": None, "position": None}


def describe_quorum(destination: int, offset: int, now: int) -> dict:
    return {**validate_event({"type": "DescribeQuorumRequest", "version": 1, "timestamp": now, "source_id": ADMIN,
                              "destination_id": destination,
                              "data": {"Topics": [{"TopicName": "__cluster_metadata",
                                                   "Partitions": [{"PartitionIndex": 0}]}]}}),
            "offset": offset, "source": None, "position": None}


def assert_refused_at_intake(exc: EventError) -> None:
    assert exc.error in INTAKE_ERRORS and error_code(exc.error) is not None, exc.error
    assert str(exc), "a refusal says why"


def assert_rows_fit(rows_by_table: dict[str, list[dict]]) -> None:
    """What the sinks do with the rows: Arrow in each table's schema (a value out of its column's range
    or of another type fails here, as it would fail the micro-batch); responses' data as JSON."""
    for name, rows in rows_by_table.items():
        if name == "responses":
            rows = [{**r, "data": json.dumps(r["data"], default=json_bytes) if not isinstance(r["data"], str)
                     else r["data"]} for r in rows]
        rows_to_arrow(name, rows)


# --- the controller ---------------------------------------------------------------------------------------

def decide(events: list[dict]) -> tuple[dict[int, dict], set[int], dict[str, list[dict]]]:
    """The base cluster's shards over ``events``: responses and rejected offsets, and every row by table."""
    outputs = []
    for shard in range(SHARDS):
        state = ShardState.from_bytes(BASE_STATES[shard])
        outputs += expand(step(shard, SHARDS, state, [e for e in events if shard in routes(e, SHARDS)]))
    rows: dict[str, list[dict]] = {}
    for o in outputs:
        if o.op in ("append", "upsert"):
            rows.setdefault(o.table, []).append(o.row)
    responses = {r["offset"]: r for r in merged_responses(outputs)}
    rows["responses"] = list(responses.values())
    return responses, {o.offset for o in outputs if o.table == "rejected"}, rows


@FAST
@given(rng=st.randoms(use_true_random=False), type_=st.sampled_from(CONTROLLER_TYPES))
def test_a_malformed_controller_request_is_answered_or_rejected_and_the_controller_goes_on(
        rng: random.Random, type_: str) -> None:
    obj = nasty_event(rng, type_, KNOWN, NOW)
    try:
        event = {**validate_event(obj), "offset": NEXT_OFFSET, "source": None, "position": None}
    except EventError as exc:
        assert_refused_at_intake(exc)
        return
    responses, rejected, rows = decide([event, heartbeat(NEXT_OFFSET + 1)])
    assert NEXT_OFFSET in responses or NEXT_OFFSET in rejected, f"{type_} neither answered nor rejected"
    if NEXT_OFFSET in responses:
        answer = responses[NEXT_OFFSET]
        assert answer["type"] == type_.replace("Request", "Response")
        codes = [answer["error_code"]] + [v for v in _error_codes(answer["data"])]
        assert all(error_name(c) is not None for c in codes if c is not None), codes
    assert NEXT_OFFSET + 1 in responses, "the next request was not answered"
    assert_rows_fit(rows)


def _error_codes(data: object):
    """Every ErrorCode in a response, nested ones included."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "ErrorCode":
                yield value
            else:
                yield from _error_codes(value)
    elif isinstance(data, list):
        for item in data:
            yield from _error_codes(item)


# --- the quorum's replicas ------------------------------------------------------------------------------

@FAST
@given(rng=st.randoms(use_true_random=False), type_=st.sampled_from(QUORUM_TYPES))
def test_a_malformed_quorum_message_is_answered_or_rejected_and_the_replica_goes_on(
        rng: random.Random, type_: str) -> None:
    destination = rng.choice([1, 2, 3, 4, 7])
    envelope = {"source_id": rng.choice([1, 2, 3, 4, ADMIN, 42]), "destination_id": destination,
                "correlation_id": rng.randint(0, 100)}
    now = QUORUM_END + rng.choice([0, 10, 5_000])
    obj = nasty_event(rng, type_, QUORUM_KNOWN, now, envelope)
    try:
        event = {**validate_event(obj), "offset": 10**6, "source": None, "position": None}
    except EventError as exc:
        assert_refused_at_intake(exc)
        return
    replica_id = event["destination_id"]
    base = QUORUM.replicas.get(replica_id)
    replica = Replica.from_json(base.to_json(), replica_id, {}) if base is not None else Replica(replica_id)
    rows, _ = replica.apply(event, {})
    tables = {t for t, _ in rows}
    assert tables <= {"responses", "rejected", "quorum_events"}, tables
    if type_.endswith("Request"):
        answered = any(t in ("responses", "rejected") for t, _ in rows) or \
            any(t == "quorum_events" and r["event"] == "dropped_while_down" for t, r in rows)
        assert answered, f"{type_} to replica {replica_id}: no answer, no rejection"
    follow, _ = replica.apply(describe_quorum(replica_id, 10**6 + 1, now + 1), {})
    assert any(t == "responses" and r["offset"] == 10**6 + 1 for t, r in follow) or replica.down
    restored = Replica.from_json(replica.to_json(), replica_id, {})  # the state store's round trip
    by_table: dict[str, list[dict]] = {}
    for t, r in rows + follow + restored.state_rows():
        by_table.setdefault(t, []).append(r)
    assert_rows_fit(by_table)


def quorum_event(type_: str, version: int, timestamp: int, source: int, destination: int, offset: int,
                 data: dict) -> dict:
    return {**validate_event({"type": type_, "version": version, "timestamp": timestamp, "source_id": source,
                              "destination_id": destination, "data": data}),
            "offset": offset, "source": None, "position": None}


def test_an_observer_that_knows_no_voter_fetches_from_the_leader_it_was_told_of() -> None:
    """Found by the property test: a replica with no voters configured (no ReplicaStartup in the log), told
    by EndQuorumEpoch that replica 2 leads, then timing out as an observer, had no voter to ask and raised."""
    replica = Replica(7)
    replica.apply(quorum_event("EndQuorumEpochRequest", 0, QUORUM_END, 2, 7, 1, {
        "ClusterId": None, "Topics": [{"TopicName": "__cluster_metadata", "Partitions": [
            {"PartitionIndex": 0, "LeaderId": 2, "LeaderEpoch": 3, "PreferredSuccessors": []}]}]}), {})
    rows, sent = replica.apply(describe_quorum(7, 2, QUORUM_END + 60_000), {})
    assert any(t == "responses" for t, _ in rows)
    assert {m["destination"] for m in sent if m["type"] == "FetchRequest"} == {2}


def test_a_replica_silent_for_decades_of_event_time_resumes_as_a_paused_process() -> None:
    """Found by the property test: an observer whose last event was stamped in 1970 fetched every 2 s of
    event time up to the next event, 55 years on, and gave up as if a timer had stuck. Past ``MAX_TICKS``
    firings its overdue timers fire once, and a ``timers_skipped`` event says so."""
    replica = Replica(7)
    replica.apply(quorum_event("ReplicaStartup", 0, 5, 7, 7, 1, {"Voters": [1, 2, 3], "Configs": []}), {})
    rows, _ = replica.apply(describe_quorum(7, 2, QUORUM_END), {})
    assert [r["event"] for t, r in rows if t == "quorum_events"].count("timers_skipped") == 1
    assert any(t == "responses" for t, _ in rows) and replica.node.next_deadline() > QUORUM_END


def test_alter_quorum_to_no_voter_is_answered_not_raised() -> None:
    """Issue 14's fix, checked here: AlterQuorum to an empty set of voters is the leader's
    VOTER_NOT_FOUND answer, never an exception, and the quorum's voters stay as they were."""
    leader = next(r for r in QUORUM.replicas.values() if r.node.state == "leader")
    replica = Replica.from_json(leader.to_json(), leader.replica_id, {})
    event = {**validate_event({"type": "AlterQuorumRequest", "version": 0, "timestamp": QUORUM_END,
                               "source_id": ADMIN, "destination_id": leader.replica_id,
                               "data": {"TargetVoters": []}}),
             "offset": 10**6, "source": None, "position": None}
    rows, _ = replica.apply(event, {})
    [answer] = [r for t, r in rows if t == "responses"]
    assert answer["error_name"] == "VOTER_NOT_FOUND"
    assert replica.node.voters == leader.node.voters and replica.node.target_voters is None


# --- the ingest paths, file by file ----------------------------------------------------------------------

GARBAGE_LINES = ["{", "[]", "null", '"text"', '{"type": 5}', '{"type": "NoSuchRequest", "timestamp": 1}']


def _objects(draws: list[tuple[random.Random, str]]) -> list[dict]:
    out = []
    for i, (rng, type_) in enumerate(draws):
        if type_ in QUORUM_TRAFFIC:
            envelope = {"source_id": rng.choice([1, 2, ADMIN]), "destination_id": rng.choice([1, 2, 3, 4]),
                        "correlation_id": i}
            out.append(nasty_event(rng, type_, QUORUM_KNOWN, QUORUM_END + i, envelope))
        else:
            out.append(nasty_event(rng, type_, KNOWN, NOW + i))
    return out


def check_ingested(tables: DeltaRsTables, source: Path, expected_positions: set[int]) -> None:
    """Every position of ``source`` is in metadata_log or in rejected, not both; then the core and the
    replicas take the log without raising, and answer or reject every request in it."""
    log = tables.read_arrow("metadata_log")
    mine = [(r["position"], r["offset"]) for r in log.select(["source", "position", "offset"]).to_pylist()
            if r["source"] == str(source)]
    rejected = [r for r in tables.read_arrow("rejected").to_pylist() if r["source"] == str(source)]
    logged, refused = {p for p, _ in mine}, {r["position"] for r in rejected}
    assert not logged & refused and logged | refused == expected_positions
    assert all(r["error"] in INTAKE_ERRORS for r in rejected), {r["error"] for r in rejected}

    events = rows_to_events(log.sort_by("offset"))
    tables_, _ = replay_log(events, SHARDS)
    answered = {r["offset"] for r in tables_.get("responses", [])} | {r["offset"] for r in tables_.get("rejected", [])}
    quorum, _ = replay_quorum(events)
    answered |= {r["offset"] for r in quorum["responses"]} | {r["offset"] for r in quorum["rejected"]} | \
        {r["offset"] for r in quorum["quorum_events"] if r["event"] == "dropped_while_down"}
    requests = {e["offset"] for e in events if e["type"].endswith("Request")}
    assert requests <= answered, f"requests neither answered nor rejected: {sorted(requests - answered)[:5]}"


DRAWS = st.lists(st.tuples(st.randoms(use_true_random=False), st.sampled_from(CONTROLLER_TYPES + QUORUM_TYPES)),
                 min_size=30, max_size=50)


@FILES
@given(draws=DRAWS, garbage=st.lists(st.sampled_from(GARBAGE_LINES), max_size=3))
def test_malformed_json_lines_of_every_type_land_in_the_log_or_in_rejected(
        draws: list[tuple[random.Random, str]], garbage: list[str]) -> None:
    lines = [json.dumps(o, default=str) for o in _objects(draws)] + garbage
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "requests.jsonl"
        source.write_text("\n".join(lines) + "\n")
        tables = DeltaRsTables(f"{folder}/warehouse")
        summary = ingest_source(tables, str(source))
        assert summary.records + summary.rejected == len(lines)
        check_ingested(tables, source, set(range(1, len(lines) + 1)))


def _avro_record(obj: dict) -> dict | None:
    """``obj`` as an Avro container holds it (bytes as bytes, the payload as its union branch), or None
    where Avro's types cannot carry it (text for an int, an unknown type): no valid container holds those."""
    spec = registry().by_name.get(obj.get("type"))
    if spec is None or not isinstance(obj.get("data"), dict):
        return None
    try:
        data = _avro_struct(spec, obj["data"])
    except ValueError:
        return None
    return {"type": obj["type"], "version": obj["version"], "timestamp": obj.get("timestamp"), "offset": None,
            "data": (f"{spec.avro['namespace']}.{spec.name}", data),
            **{k: obj[k] for k in ("source_id", "destination_id", "correlation_id") if k in obj}}


def _avro_struct(spec: StructSpec, data: dict) -> dict:
    """An Avro record holds every field of every version: absent ones take Kafka's default (which the
    reader drops again for versions without them); bytes travel as bytes."""
    out = dict(data)
    for f in spec.fields:
        if f.name not in out:
            out[f.name] = f.default()
            continue
        value = out[f.name]
        if f.struct is not None and isinstance(value, dict):
            out[f.name] = _avro_struct(f.struct, value)
        elif f.struct is not None and isinstance(value, list):
            out[f.name] = [_avro_struct(f.struct, v) if isinstance(v, dict) else v for v in value]
        elif f.element in ("bytes", "records") and isinstance(value, str):
            out[f.name] = base64.b64decode(value, validate=True)  # ValueError: no bytes Avro could carry
    return out


def test_well_formed_events_of_every_type_make_valid_avro_records() -> None:
    """The Avro test's converter is no filter that lets nothing through: the base cluster's events, and a
    well-formed event of each quorum type, are all valid records of the container's schema."""
    schema = fastavro.parse_schema(events_mod.avro_event_schema())
    quorum = [next(e for e in QUORUM.traffic + DRAFT_TRAFFIC if e["type"] == t) for t in QUORUM_TYPES]
    for event in BASE_EVENTS + quorum:
        record = _avro_record({k: v for k, v in event.items() if k in ("type", "version", "timestamp", "data",
                                                                        "source_id", "destination_id",
                                                                        "correlation_id")})
        assert record is not None and fastavro.validation.validate(record, schema, raise_errors=False), event["type"]


@FILES
@given(draws=DRAWS)
def test_malformed_avro_events_of_every_type_land_in_the_log_or_in_rejected(
        draws: list[tuple[random.Random, str]]) -> None:
    schema = fastavro.parse_schema(events_mod.avro_event_schema())
    records = [r for r in map(_avro_record, _objects(draws)) if r is not None
               and fastavro.validation.validate(r, schema, raise_errors=False)]
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "requests.avro"
        with open(source, "wb") as handle:
            fastavro.writer(handle, schema, records)
        tables = DeltaRsTables(f"{folder}/warehouse")
        summary = ingest_source(tables, str(source))
        assert summary.records + summary.rejected == len(records)
        check_ingested(tables, source, set(range(len(records))))


# --- once through Spark --------------------------------------------------------------------------------

def test_malformed_requests_through_the_streaming_job_equal_the_core(spark, tmp_path: Path) -> None:
    """The Spark shell carries payloads as JSON and back (``event_from_row``): what passed intake must
    decide there exactly as in the core."""
    rng = random.Random(16)
    draws = [(random.Random(rng.getrandbits(32)), rng.choice(CONTROLLER_TYPES)) for _ in range(120)]
    base = tmp_path / "base.jsonl"
    base.write_text("".join(json.dumps({k: e[k] for k in ("type", "version", "timestamp", "data")}, default=json_bytes)
                            + "\n" for e in BASE_EVENTS))
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(o, default=str) + "\n" for o in _objects(draws)))
    warehouse = Warehouse(str(tmp_path / "warehouse"), spark=spark)
    for source in (base, requests):
        ingest_source(warehouse, str(source))
    run_controller(warehouse, tmp_path / "checkpoint", SHARDS, None)
    events = logged_events(warehouse)
    assert sum(e["type"].endswith("Request") for e in events) > 60, "most requests should pass intake"
    spark_tables = warehouse_tables(warehouse)
    core = reference_tables(events, SHARDS)
    for name in core:
        assert spark_tables[name] == core[name], name
    answered = {r["offset"] for r in warehouse.read_arrow("responses", columns=["offset"]).to_pylist()}
    rejected = {r["offset"] for r in warehouse.read_arrow("rejected", columns=["offset"]).to_pylist()}
    assert {e["offset"] for e in events if e["type"].endswith("Request")} <= answered | rejected
