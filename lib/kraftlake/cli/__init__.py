"""What the jobs do: configuration from the command line, runtime, terminal output, and one module per job.

delta-rs logs the credential providers it tried at WARN on stderr before an object store answers; a job
says what failed in one line of its own, so those lines are left to ``RUST_LOG=warn`` (set before
deltalake is first imported, which is when its logger reads it).
"""

import os

os.environ.setdefault("RUST_LOG", "error")
