"""Draw an incident: one self-contained HTML page of the warehouse's history over event time.

The job's options and logic are ``kraftlake.cli.report`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/report.py` needs no PYTHONPATH

from kraftlake.cli.report import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("report", main))
