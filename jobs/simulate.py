"""Simulate a Kafka cluster: write its controller request log into the warehouse, deterministically.

The job's options and logic are ``kraftlake.cli.simulate`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys

from kraftlake.cli.simulate import main

if __name__ == "__main__":
    sys.exit(main())
