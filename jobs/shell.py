"""Browse the metadata image at any offset or time, like kafka-metadata-shell.sh.

The job's options and logic are ``kraftlake.cli.shell`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))  # `python jobs/shell.py` needs no PYTHONPATH

from kraftlake.cli.shell import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("shell", main))
