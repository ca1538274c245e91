"""Print the records of Kafka metadata log files, one JSON object per line.

The job's options and logic are ``kraftlake.cli.dump`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/dump.py` needs no PYTHONPATH

from kraftlake.cli.dump import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("dump", main))
