"""Check the KIP-841 invariants at every offset of the warehouse's log (exit code 1 on any violation).

The job's options and logic are ``kraftlake.cli.check`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/check.py` needs no PYTHONPATH

from kraftlake.cli.check import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("check", main))
