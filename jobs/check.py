"""Check the KIP-841 invariants at every offset of the warehouse's log (exit code 1 on any violation).

The job's options and logic are ``kraftlake.cli.check`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys

from kraftlake.cli.check import main

if __name__ == "__main__":
    sys.exit(main())
