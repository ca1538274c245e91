"""The metadata quorum, like ``kafka-metadata-quorum.sh describe`` (KIP-595), from the warehouse.

The job's options and logic are ``kraftlake.cli.quorum`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/quorum.py` needs no PYTHONPATH

from kraftlake.cli.quorum import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("quorum", main))
