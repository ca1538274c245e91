"""The warehouse as SQL: every table as a view named after it, plus the operators' standing questions
(``describe``, ``reassignments``, ``quorum_history``) as views over them (``VIEWS``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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


# The metadata quorum's history from the log itself (KIP-595): every epoch between the first and the last
# the batches carry, with the LeaderChangeMessage that opened it (leader, voters, granting voters) and how
# long it lasted. An epoch that wrote nothing (an election that won nothing, or a leader that appended
# nothing before the next election) still gets its row, with no records.
QUORUM_HISTORY = """
WITH epochs AS (
  SELECT leader_epoch AS epoch, min(offset) AS first_offset, min(timestamp) AS first_timestamp,
         count(*) AS records
  FROM metadata_log WHERE leader_epoch >= 0 GROUP BY leader_epoch),
changes AS (
  SELECT leader_epoch AS epoch, min_by(LeaderChangeMessage, offset) AS change
  FROM metadata_log WHERE type = 'LeaderChangeMessage' GROUP BY leader_epoch),
every_epoch AS (SELECT explode(sequence(min(epoch), max(epoch))) AS epoch FROM epochs),
log_end AS (SELECT max(timestamp) AS last FROM metadata_log)
SELECT a.epoch, c.change.LeaderId AS leader, transform(c.change.Voters, v -> v.VoterId) AS voters,
       transform(c.change.GrantingVoters, v -> v.VoterId) AS granting_voters,
       e.first_offset, e.first_timestamp, coalesce(e.records, 0) AS records,
       unix_millis(coalesce(min(e.first_timestamp) OVER (ORDER BY a.epoch
                                ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING), log_end.last))
         - unix_millis(e.first_timestamp) AS duration_ms
FROM every_epoch a LEFT JOIN epochs e ON e.epoch = a.epoch LEFT JOIN changes c ON c.epoch = a.epoch
CROSS JOIN log_end
ORDER BY a.epoch
"""


@dataclass(frozen=True)
class View:
    """A standing question as a temporary view over the tables. Registered from its SQL text, so each
    query resolves it against the tables as registered then (never a plan frozen at registration)."""

    name: str
    sql: str
    doc: str  # one line, for the SQL shell's \\tables


VIEWS = (
    View("describe", DESCRIBE, "One line per partition, topics by name, in the spirit of kafka-topics.sh --describe."),
    View("reassignments", REASSIGNMENTS, "Partitions under reassignment (KIP-455), with when it started and its age."),
    View("quorum_history", QUORUM_HISTORY, "The metadata quorum's epochs (KIP-595): leader, voters, records, duration."),
)


def register_views(warehouse: Warehouse) -> list[str]:
    """Every table of the warehouse as a temporary view named after it, plus the ``VIEWS`` whose tables
    it has: all at once, for a session that queries them directly (``kraftlake.spark.catalog``)."""
    from kraftlake.spark.catalog import Catalog  # which builds on the views above

    return Catalog(warehouse).register_all()
