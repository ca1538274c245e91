"""The warehouse as SQL: every table as a view named after it, plus the operators' standing questions
(``describe``, ``reassignments``, ``quorum_history``, ``open_anomalies``) as views over them (``VIEWS``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kraftlake.image.cluster_image import CONFIG_RESOURCE_TYPES, DIRECTORY_IDS, LEADER_RECOVERY_STATES
from kraftlake.metadata.schemas import registry
from kraftlake.metadata.tables import table_arrow_schema
from kraftlake.storage import Warehouse


class QueryError(Exception):
    """A query Spark refused or could not run, with Spark's message (the CLI shows it, not a JVM trace)."""


@contextmanager
def query_errors() -> Iterator[None]:
    """Spark's errors inside the block as ``QueryError``, so that callers need not import pyspark."""
    from pyspark.errors import PySparkException

    try:
        yield
    except PySparkException as exc:
        raise QueryError(str(exc)) from exc

# In the spirit of `kafka-topics.sh --describe`: one line per partition, topics by name. The target of a
# reassignment is the replicas without the removing ones (KIP-455), in their order.
DESCRIBE = """
SELECT topic, topic_id, partition, leader, replicas, isr, adding_replicas, removing_replicas,
       CASE WHEN size(adding_replicas) + size(removing_replicas) > 0
            THEN array_except(replicas, removing_replicas) END AS target_replicas,
       elr, leader_epoch, partition_epoch,
       CASE leader_recovery_state WHEN 1 THEN 'RECOVERING' ELSE 'RECOVERED' END AS leader_recovery_state
FROM partitions ORDER BY topic, partition
"""

# Partitions under reassignment, with when it started: the last change that took the partition from
# no adding/removing replicas to some. Age is measured against the newest event of the log.
REASSIGNMENTS = """
WITH changes AS (
  SELECT topic_id, partition, offset, timestamp,
         size(coalesce(adding_replicas, array())) + size(coalesce(removing_replicas, array())) AS moving,
         lag(size(coalesce(adding_replicas, array())) + size(coalesce(removing_replicas, array())), 1, 0)
           OVER (PARTITION BY topic_id, partition ORDER BY offset) AS was_moving
  FROM partition_history),
starts AS (
  SELECT topic_id, partition, max_by(offset, offset) AS started_offset, max_by(timestamp, offset) AS started_at
  FROM changes WHERE moving > 0 AND was_moving = 0 GROUP BY topic_id, partition),
log_end AS (SELECT max(timestamp) AS now FROM metadata_log)
SELECT p.topic, p.partition, p.replicas AS current_replicas,
       array_except(p.replicas, p.removing_replicas) AS target_replicas,
       p.adding_replicas, p.removing_replicas, p.isr, p.leader, s.started_offset, s.started_at,
       CAST(unix_millis(log_end.now) - unix_millis(s.started_at) AS BIGINT) AS age_ms
FROM partitions p CROSS JOIN log_end
LEFT JOIN starts s ON s.topic_id = p.topic_id AND s.partition = p.partition
WHERE size(p.adding_replicas) + size(p.removing_replicas) > 0
ORDER BY p.topic, p.partition
"""

# What is wrong now: the anomaly episodes that have not ended (docs/anomalies.md), oldest first, every kind
# the table holds. Age is measured against the newest event of the log, like a reassignment's.
OPEN_ANOMALIES = """
WITH log_end AS (SELECT max(timestamp) AS now FROM metadata_log)
SELECT a.kind, a.entity, a.start_offset, a.start_time,
       CAST(unix_millis(log_end.now) - unix_millis(a.start_time) AS BIGINT) AS age_ms, a.cause, a.cause_offset, a.detail
FROM anomalies a CROSS JOIN log_end
WHERE a.end_offset IS NULL
ORDER BY a.start_offset, a.kind, a.entity
"""


def anomalies_of(literal: str) -> str:
    """Every episode, open or ended, whose kind, entity or topic is the SQL string ``literal``: one kind
    (``offline_partition``), one partition or broker (``orders-3``, ``broker 2``), or a topic's partitions."""
    return ("SELECT kind, entity, start_offset, start_time, end_offset, end_time, cause, cause_offset, detail "
            f"FROM anomalies WHERE kind = {literal} OR entity = {literal} OR topic = {literal} "
            "ORDER BY start_offset, kind, entity")


# The metadata quorum's history from the log itself (KIP-595): every epoch between the first and the last
# the batches carry, with the LeaderChangeMessage that opened it (leader, voters, granting voters) and how
# long it lasted. An epoch that wrote nothing (an election that won nothing, or a leader that appended
# nothing before the next election) still gets its row, with no records.
def quorum_history_view(log_columns: list[str]) -> str:
    """``quorum_history``'s SQL: each epoch with the LeaderChangeMessage that opened it; when the log has
    the KIP-595 draft's VoterAssignmentMessages (ADR 0012), the ClusterId and voters each epoch's leader
    wrote, so that the epoch that bootstrapped the cluster (generated its id) and those that grew it show."""
    assigned = "VoterAssignmentMessage" in log_columns
    assignments = """,
assignments AS (
  SELECT leader_epoch AS epoch, min_by(VoterAssignmentMessage.ClusterId, offset) AS cluster_id,
         max_by(transform(VoterAssignmentMessage.Voters, v -> v.VoterId), offset) AS assigned_voters
  FROM metadata_log WHERE type = 'VoterAssignmentMessage' GROUP BY leader_epoch)""" if assigned else ""
    columns = ", v.cluster_id, v.assigned_voters" if assigned else ""
    join = " LEFT JOIN assignments v ON v.epoch = a.epoch" if assigned else ""
    return f"""
WITH epochs AS (
  SELECT leader_epoch AS epoch, min(offset) AS first_offset, min(timestamp) AS first_timestamp,
         count(*) AS records
  FROM metadata_log WHERE leader_epoch >= 0 GROUP BY leader_epoch),
changes AS (
  SELECT leader_epoch AS epoch, min_by(LeaderChangeMessage, offset) AS change
  FROM metadata_log WHERE type = 'LeaderChangeMessage' GROUP BY leader_epoch){assignments},
every_epoch AS (SELECT explode(sequence(min(epoch), max(epoch))) AS epoch FROM epochs),
log_end AS (SELECT max(timestamp) AS last FROM metadata_log)
SELECT a.epoch, c.change.LeaderId AS leader, transform(c.change.Voters, v -> v.VoterId) AS voters,
       transform(c.change.GrantingVoters, v -> v.VoterId) AS granting_voters,
       e.first_offset, e.first_timestamp, coalesce(e.records, 0) AS records,
       unix_millis(coalesce(min(e.first_timestamp) OVER (ORDER BY a.epoch
                                ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING), log_end.last))
         - unix_millis(e.first_timestamp) AS duration_ms{columns}
FROM every_epoch a LEFT JOIN epochs e ON e.epoch = a.epoch LEFT JOIN changes c ON c.epoch = a.epoch{join}
CROSS JOIN log_end
ORDER BY a.epoch
"""


def _quorum_history(catalog: Any) -> str:
    return quorum_history_view(catalog.spark.table("metadata_log").columns)


# Kafka's codes by name. The tables keep what Kafka's records hold (a ConfigRecord's ResourceType, a
# LeaderRecoveryState, directory Uuids), so they read like the log and join with it; beside each, a view
# ``<table>_decoded`` shows the same rows with those codes as Kafka names them.
# (the names: kraftlake.image.cluster_image, which the metadata shell prints them with too)


def _named(expression: str, names: Mapping[object, str], otherwise: str) -> str:
    cases = " ".join(f"WHEN {value!r} THEN '{name}'" for value, name in names.items())
    return f"CASE {expression} {cases} ELSE {otherwise} END"


# table -> {column: (the view's column, its expression)}; None drops the column
DECODED: dict[str, dict[str, tuple[str, str] | None]] = {
    "brokers": {"fenced": ("state", "CASE WHEN fenced THEN 'fenced' WHEN in_controlled_shutdown "
                                    "THEN 'controlled_shutdown' ELSE 'unfenced' END"),
                "in_controlled_shutdown": None},
    "configs": {"resource_type": ("resource_type", _named("resource_type", CONFIG_RESOURCE_TYPES, "'UNKNOWN'"))},
    "partitions": {
        "leader_recovery_state": ("leader_recovery_state",
                                  _named("leader_recovery_state", LEADER_RECOVERY_STATES, "NULL")),
        "directories": ("directories", f"transform(directories, d -> {_named('d', DIRECTORY_IDS, 'd')})")},
    "partition_history": {"leader_recovery_state": ("leader_recovery_state",
                                                    _named("leader_recovery_state", LEADER_RECOVERY_STATES, "NULL"))},
}


def decoding_view(table: str, present: list[str] | None = None) -> str:
    """The SQL of ``<table>_decoded``: the table's columns in their order (``present``: those the warehouse's
    table has, an older one maybe fewer; by default its schema's), codes replaced."""
    columns = []
    for name in present if present is not None else table_arrow_schema(table).names:
        if name not in DECODED[table]:
            columns.append(f"`{name}`")
        elif DECODED[table][name] is not None:
            alias, expression = DECODED[table][name]
            columns.append(f"{expression} AS `{alias}`")
    return f"SELECT {', '.join(columns)} FROM {table}"


def cluster_view(names: list[str], log_columns: list[str]) -> str | None:
    """The SQL of ``cluster``, over the tables among ``names`` (``log_columns``: metadata_log's, an older
    table may lack a newer type's): the cluster's id, where the input has it, and
    its finalized feature levels now (the last ``features`` row of each). Kafka keeps the id in each log
    directory's meta.properties, not in the metadata log; the log holds it only in requests (a hand-written
    BrokerRegistrationRequest, the KIP-595 draft's VoterAssignmentMessage, the quorum's traffic). The first
    place that has one, in this order, says it."""
    found = []
    if "quorum_files" in names:
        # Spark unescapes the literal's \t, \r, \n into the characters: the regex holds no backslash
        found.append("SELECT regexp_extract(content, '(?m)^[ \\t]*cluster[.]id[ \\t]*=[ \\t]*([^ \\t\\r\\n]+)', 1) "
                     "AS id, 'meta.properties' AS found_in, 0 AS rank FROM quorum_files WHERE kind = 'meta.properties'")
    carrying = sorted(m.name for m in registry().event_types() if "ClusterId" in m.by_name and m.name in log_columns)
    if "metadata_log" in names and carrying:
        found.append(f"SELECT coalesce({', '.join(f'{t}.ClusterId' for t in carrying)}) AS id, type AS found_in, "
                     "CASE type WHEN 'BrokerRegistrationRequest' THEN 1 WHEN 'VoterAssignmentMessage' THEN 1 ELSE 2 END "
                     "AS rank FROM metadata_log "
                     f"WHERE type IN ({', '.join(repr(t) for t in carrying)})")
    if "quorum_files" in names:
        found.append("SELECT get_json_object(content, '$.clusterId') AS id, 'quorum-state' AS found_in, 99 AS rank "
                     "FROM quorum_files WHERE kind = 'quorum-state'")
    if not found or "features" not in names:
        return None
    return f"""
WITH ids AS ({' UNION ALL '.join(found)}),
known AS (SELECT id, found_in FROM ids WHERE id IS NOT NULL AND id <> '' ORDER BY rank, found_in LIMIT 1),
levels AS (SELECT feature, max_by(level, struct(applied_offset, offset)) AS level FROM features GROUP BY feature)
SELECT (SELECT id FROM known) AS cluster_id, (SELECT found_in FROM known) AS cluster_id_from,
       (SELECT level FROM levels WHERE feature = 'metadata.version') AS metadata_version,
       (SELECT map_from_entries(sort_array(collect_list(struct(feature, level)))) FROM levels) AS features
"""


def _decoded(table: str) -> Callable[[Any], str]:
    """``<table>_decoded``'s SQL over the table as the session has it registered (an older table may lack a
    newer column): reading its columns resolves it first (``Catalog._create``)."""
    return lambda catalog: decoding_view(table, catalog.spark.table(table).columns)


def _cluster(catalog: Any) -> str | None:
    """``cluster``'s SQL over those of its tables the warehouse has; None without ``features``."""
    names = [n for n in ("quorum_files", "metadata_log", "features") if catalog.resolve_if_present(n)]
    log_columns = catalog.spark.table("metadata_log").columns if "metadata_log" in names else []
    return cluster_view(names, log_columns)


@dataclass(frozen=True)
class View:
    """A standing question as a temporary view over the tables. Registered from its SQL text, so each
    query resolves it against the tables as registered then (never a plan frozen at registration). ``sql``
    is the text, or makes it from the ``Catalog`` registering it, for a view whose columns depend on the
    tables the warehouse has (None: it has too few: ``needs`` is the table that keeps it out)."""

    name: str
    sql: str | Callable[[Any], str | None]
    doc: str  # one line, for the SQL shell's \\tables
    needs: str = ""


VIEWS = (
    View("describe", DESCRIBE, "One line per partition, topics by name, in the spirit of kafka-topics.sh --describe."),
    View("reassignments", REASSIGNMENTS, "Partitions under reassignment (KIP-455), with when it started and its age."),
    View("open_anomalies", OPEN_ANOMALIES, "The anomaly episodes that have not ended, oldest first, with their age."),
    View("quorum_history", _quorum_history, "The metadata quorum's epochs (KIP-595): leader, voters, records, duration.",
         needs="metadata_log"),
    *(View(f"{table}_decoded", _decoded(table), f"{table} with Kafka's codes by name ({', '.join(codes)}).")
      for table, codes in (("brokers", ["state"]), ("configs", ["resource_type"]),
                           ("partitions", ["leader_recovery_state", "directories"]),
                           ("partition_history", ["leader_recovery_state"]))),
    View("cluster", _cluster, "The cluster id, where the input has it, and the finalized feature levels now.",
         needs="features"),
)


def register_views(warehouse: Warehouse) -> list[str]:
    """Every table of the warehouse as a temporary view named after it, plus the ``VIEWS`` whose tables
    it has: all at once, for a session that queries them directly (``kraftlake.spark.catalog``)."""
    from kraftlake.spark.catalog import Catalog  # which builds on the views above

    return Catalog(warehouse).register_all()
