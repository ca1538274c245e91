"""The embedded default: write the sample cluster's metadata log, ingest it, and query it.

Everything runs on this machine: local Spark, Delta tables in a local folder (``warehouse/`` unless
--warehouse says otherwise), sample data generated in the real Kafka binary format.

    ./spark-submit.sh jobs/quickstart.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kraftlake.config import add_common_arguments, config_from_args
from kraftlake.ingest import ingest
from kraftlake.output import print_table
from kraftlake.runtime import open_warehouse, register_views
from kraftlake.sample import write_sample

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import print_summary  # noqa: E402  (the ingest job's summary, printed the same way)

QUERIES = (
    ("Events by type", "SELECT type, count(*) AS events, min(offset) AS first_offset, max(offset) AS last_offset "
                       "FROM metadata_log GROUP BY type ORDER BY events DESC"),
    ("Broker 2's controlled shutdown, as the log recorded it",
     "SELECT offset, timestamp, type, BrokerRegistrationChangeRecord.BrokerId AS broker, "
     "BrokerRegistrationChangeRecord.InControlledShutdown AS in_controlled_shutdown, "
     "BrokerRegistrationChangeRecord.Fenced AS fenced FROM metadata_log "
     "WHERE type = 'BrokerRegistrationChangeRecord' ORDER BY offset"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample-dir", default="sample-data", help="where the sample log is written")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    config = config_from_args(args)
    log_dir, requests = write_sample(args.sample_dir)
    print(f"sample cluster written: {log_dir} and {requests}")
    warehouse = open_warehouse(config, "kraftlake-quickstart", with_spark=True)
    ingest(warehouse, [str(log_dir), str(requests)], on_source=print_summary)
    register_views(warehouse)
    for title, query in QUERIES:
        print(f"\n{title}:\n  {query}")
        frame = warehouse.spark.sql(query)
        print_table(frame.columns, [tuple(r) for r in frame.collect()])
    print(f"\nwarehouse: {warehouse.root}\nnext: ./spark-submit.sh jobs/sql.py --warehouse {warehouse.root} \"SELECT ...\"")
    return 0


if __name__ == "__main__":
    sys.exit(main())
