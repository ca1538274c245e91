"""Measure where the time goes: one command, a JSON report and a PNG chart (the suite is ``benchmarks/``).

    ./spark-submit.sh jobs/bench.py --report bench-report.json --chart bench.png
    ./spark-submit.sh jobs/bench.py --quick              # everything at small sizes (a smoke test)

``--help`` lists the options; docs/jobs/bench.md and docs/performance.md say what the numbers mean.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "lib")]  # benchmarks/ and the library, without PYTHONPATH

from benchmarks.suite import main  # noqa: E402
from kraftlake.cli.launcher import run_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_job("bench", main))
