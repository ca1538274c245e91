"""The controller: replay ``metadata_log`` into the state tables as an exactly-once streaming query.

The job's options and logic are ``kraftlake.cli.controller`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/controller.py` needs no PYTHONPATH

from kraftlake.cli.controller import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("controller", main))
