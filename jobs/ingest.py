"""Ingest Kafka metadata logs and hand-written events into the warehouse's ``metadata_log``.

The job's options and logic are ``kraftlake.cli.ingest`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys

from kraftlake.cli.ingest import main

if __name__ == "__main__":
    sys.exit(main())
