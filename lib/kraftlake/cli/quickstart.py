"""The embedded default: write the sample cluster's metadata log, ingest it, replay it, query it.

Everything runs on this machine: local Spark, Delta tables in a local folder (``warehouse/`` unless
--warehouse says otherwise), sample data generated in the real Kafka binary format. Running it again
adds nothing: the ingest and the controller's checkpoint both remember what they did.

    ./spark-submit.sh jobs/quickstart.py
"""

from __future__ import annotations

import argparse
import functools
import shlex
import sys
from pathlib import Path

from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.cli.ingest import print_summary
from kraftlake.cli.launcher import PATH_ERRORS, UserError, error_line
from kraftlake.cli.sql_session import Session
from kraftlake.cli.report import write_report
from kraftlake.cli.runtime import checkpoint_location, meter, open_warehouse, replay_configs
from kraftlake.codec.bounds import Limits
from kraftlake.sim.sample import write_sample
from kraftlake.spark.controller_query import ControllerSettings, run
from kraftlake.spark.catalog import Catalog
from kraftlake.storage.ingest import ingest

QUERIES = (
    ("Events in the metadata log, by type",
     "SELECT type, count(*) AS events, min(offset) AS first_offset, max(offset) AS last_offset "
     "FROM metadata_log GROUP BY type ORDER BY events DESC"),
    ("Brokers now", "SELECT broker_id, epoch, fenced, in_controlled_shutdown, rack, listeners FROM brokers "
                    "ORDER BY broker_id"),
    ("Partitions whose ISR is smaller than their replica set (kafka-topics.sh --describe style)",
     "SELECT topic, partition, leader, replicas, isr FROM describe WHERE size(isr) < size(replicas)"),
    ("Who led orders-1, and with which ISR, at each change (partition_history)",
     "SELECT offset, timestamp, cause, leader_before, leader, isr_before, isr, leader_epoch "
     "FROM partition_history WHERE topic = 'orders' AND partition = 1 ORDER BY offset"),
    ("What if broker 3 shuts down now? The controller's answers to its heartbeats",
     "SELECT r.offset, r.request_type, m.BrokerHeartbeatRequest.BrokerId AS broker, "
     "m.BrokerHeartbeatRequest.WantShutDown AS want_shut_down, r.error_name, "
     "get_json_object(r.data, '$.ShouldShutDown') AS should_shut_down "
     "FROM responses r JOIN metadata_log m ON m.offset = r.offset ORDER BY r.offset"),
    ("... and the partitions left offline or under min.insync.replicas",
     "SELECT d.topic, d.partition, d.leader, d.isr, c.value AS min_insync_replicas FROM describe d "
     "LEFT JOIN configs c ON c.resource_type = 2 AND c.resource_name = d.topic AND c.name = 'min.insync.replicas' "
     "WHERE d.leader = -1 OR size(d.isr) < coalesce(CAST(c.value AS INT), 1) ORDER BY d.topic, d.partition"),
)


# piped into jobs/sql.py: two statements, one session
SHELL = ("SELECT count(*) AS partitions, count_if(size(isr) < size(replicas)) AS under_replicated FROM describe;\n"
         "SELECT topic, count(*) AS changes FROM partition_history GROUP BY topic ORDER BY topic;\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample-dir", default="sample-data", help="where the sample log is written")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    config = config_from_args(args)
    try:
        log_dir, what_if = write_sample(args.sample_dir)
    except PATH_ERRORS as exc:
        raise UserError(f"--sample-dir {args.sample_dir}: {error_line(exc)}") from None
    # the tour's answers go to stdout; what it did on the way, and where to go next, to stderr
    print(f"sample cluster written to {log_dir}, what-if requests to {what_if}", file=sys.stderr)
    warehouse = open_warehouse(config, "kraftlake-quickstart", with_spark=True)
    ingest(warehouse, [str(log_dir), str(what_if)], on_source=functools.partial(print_summary, file=sys.stderr),
           meter=lambda source: meter(config, f"ingest {source}"), limits=Limits.from_settings(config))
    run(warehouse, ControllerSettings(shards=config.get_int("kraftlake.shards", minimum=1),
                                      checkpoint=checkpoint_location(config, warehouse, "controller"), once=True,
                                      kafka_config=replay_configs(config)), meter(config, "controller", "offsets"))
    # the questions go through the SQL shell's session code, in this job's warm Spark
    session = Session(Catalog(warehouse), "text", max_rows=1000, timing=False)
    for title, query in QUERIES:
        print(f"\n{title}:\n  {query}")
        if not session.run(query):
            return 1
    piped = SHELL.replace("\n", "\\n")
    print("\nThe SQL shell (jobs/sql.py) reads `;`-separated statements from stdin, or from you on a terminal; "
          f"these two as\n  printf \"{piped}\" | ./spark-submit.sh jobs/sql.py --warehouse {shlex.quote(warehouse.root)}\n"
          "would answer them:")
    if session.run_all(SHELL.splitlines(keepends=True), "stdin:") != 0:
        return 1
    page = Path(args.sample_dir) / "report.html"
    write_report(warehouse.root, page, config, title="kraftlake quickstart: the sample cluster")
    print(f"\nwarehouse: {warehouse.root}\nreport: {page} (the timeline; open it in a browser)"
          f"\nnext: ./spark-submit.sh jobs/sql.py --warehouse {shlex.quote(warehouse.root)}    "
          "# the SQL shell: \\tables lists the tables and views, \\q quits", file=sys.stderr)
    return 0

