"""Simulate a Kafka cluster: write its controller request log into the warehouse, deterministically.

The job's options and logic are ``kraftlake.cli.simulate`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/simulate.py` needs no PYTHONPATH

from kraftlake.cli.simulate import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("simulate", main))
