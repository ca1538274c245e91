"""Measure where the time goes: one command, a JSON report and a PNG chart (the suite is ``benchmarks/``).

    ./spark-submit.sh jobs/bench.py --report bench-report.json --chart bench.png
    ./spark-submit.sh jobs/bench.py --quick              # everything at small sizes (a smoke test)

``--help`` lists the options; docs/jobs/bench.md and docs/performance.md say what the numbers mean.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, where benchmarks/ is

from benchmarks.suite import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
