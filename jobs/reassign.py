"""Partition reassignments, like ``kafka-reassign-partitions.sh`` (KIP-455), against the warehouse.

The job's options and logic are ``kraftlake.cli.reassign`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys

from kraftlake.cli.reassign import main

if __name__ == "__main__":
    sys.exit(main())
