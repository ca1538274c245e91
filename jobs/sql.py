"""Run Spark SQL over the warehouse: every Delta table in it is registered under its own name.

The job's options and logic are ``kraftlake.cli.sql`` (``--help`` lists them); this file is what
spark-submit runs.
"""
# spark-submit.sh: driver first

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/sql.py` needs no PYTHONPATH

from kraftlake.cli.sql import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("sql", main))
