"""Ingest Kafka metadata logs and hand-written events into the warehouse's ``metadata_log``.

The job's options and logic are ``kraftlake.cli.ingest`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/ingest.py` needs no PYTHONPATH

from kraftlake.cli.ingest import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("ingest", main))
