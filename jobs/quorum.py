"""The metadata quorum, like ``kafka-metadata-quorum.sh describe`` (KIP-595), from the warehouse.

The job's options and logic are ``kraftlake.cli.quorum`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys

from kraftlake.cli.quorum import main

if __name__ == "__main__":
    sys.exit(main())
