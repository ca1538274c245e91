"""Draw an incident: one self-contained HTML page of the warehouse's history over event time.

The job's options and logic are ``kraftlake.cli.report`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys

from kraftlake.cli.report import main

if __name__ == "__main__":
    sys.exit(main())
