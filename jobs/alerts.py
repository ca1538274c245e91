"""Alert lines from a state table's change feed: one line on stdout per change that matches, as it commits.

The job's options and logic are ``kraftlake.cli.alerts`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/alerts.py` needs no PYTHONPATH

from kraftlake.cli.alerts import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("alerts", main))
