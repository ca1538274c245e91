"""The controller: replay ``metadata_log`` into the state tables as an exactly-once streaming query.

The job's options and logic are ``kraftlake.cli.controller`` (``--help`` lists them); this file is what
spark-submit runs.
"""

import sys

from kraftlake.cli.controller import main

if __name__ == "__main__":
    sys.exit(main())
