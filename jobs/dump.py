"""Print the records of Kafka metadata log files, one JSON object per line.

The job's options and logic are ``kraftlake.cli.dump`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys

from kraftlake.cli.dump import main

if __name__ == "__main__":
    sys.exit(main())
