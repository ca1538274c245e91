"""The embedded default: write the sample cluster's metadata log, ingest it, replay it, query it.

The job's options and logic are ``kraftlake.cli.quickstart`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/quickstart.py` needs no PYTHONPATH

from kraftlake.cli.quickstart import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("quickstart", main))
