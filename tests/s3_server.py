"""An S3-speaking server on 127.0.0.1 for the object-store tests: moto's S3, served one request at a time.

Run as ``python tests/s3_server.py``: it prints the port it bound (chosen by the kernel) and serves
until killed. moto's own launcher serves requests on threads, and its check of ``If-None-Match: *``
and the write after it are not one atomic step, so two racing conditional puts could both succeed
there. Served one at a time (HTTP/1.0, no keep-alive connection holds the server), each request is
atomic, as S3's conditional writes are: the race test then tests delta-rs, not the mock.
"""

from __future__ import annotations

import sys

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server


def main() -> None:
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", 0, app, threaded=False, request_handler=MotoRequestHandler)
    print(server.server_port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
