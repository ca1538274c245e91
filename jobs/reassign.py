"""Partition reassignments, like ``kafka-reassign-partitions.sh`` (KIP-455), against the warehouse.

The job's options and logic are ``kraftlake.cli.reassign`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/reassign.py` needs no PYTHONPATH

from kraftlake.cli.reassign import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("reassign", main))
