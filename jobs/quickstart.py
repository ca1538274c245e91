"""The embedded default: write the sample cluster's metadata log, ingest it, replay it, query it.

The job's options and logic are ``kraftlake.cli.quickstart`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys

from kraftlake.cli.quickstart import main

if __name__ == "__main__":
    sys.exit(main())
