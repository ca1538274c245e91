"""Run Spark SQL over the warehouse: every Delta table in it is registered under its own name.

The job's options and logic are ``kraftlake.cli.sql`` (``--help`` lists them); this file is what
spark-submit runs.
"""
# spark-submit.sh: driver first

import sys

from kraftlake.cli.sql import main

if __name__ == "__main__":
    sys.exit(main())
