"""A proxy on 127.0.0.1 between S3 clients (delta-rs, pyarrow, the controller job) and the S3 test server,
which decides for each request whether it reaches the store and whether its answer reaches the client.

The faults are the ones an object store shows in production: an error answer instead of the work (500
InternalError, 503 SlowDown), a slow answer, and a connection dropped either before the request reached
the store or after the store did the work, so that the client never hears that its write happened. The
last is the one a client cannot tell from the first, and the one where a retried write may do it twice.

Run as ``python tests/fault_proxy.py <store's port>``: it prints the port it bound (chosen by the kernel),
serves with a thread per connection, and takes its schedule from its stdin, one JSON line at a time
(``{"schedule": "steady", "rate": 0.1, "seed": 7}``, ``{"schedule": "down"}``, ``{"schedule": "pass"}``),
answering each with a JSON line counting the faults dealt so far. It is a process of its own because
delta-rs holds the interpreter's lock while it waits for the store: a proxy thread in the test's process
could not answer it. ``servers.FaultProxyServer`` starts and drives it.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import socket
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

PASS, INTERNAL_ERROR, SLOW_DOWN, DELAY, DROP_BEFORE, DROP_AFTER = (
    "pass", "500", "503", "delay", "drop-before", "drop-after")
FAULTS = (INTERNAL_ERROR, SLOW_DOWN, DELAY, DROP_BEFORE, DROP_AFTER)
_ERRORS = {INTERNAL_ERROR: (500, "InternalError", "We encountered an internal error. Please try again."),
           SLOW_DOWN: (503, "SlowDown", "Please reduce your request rate.")}
# Hop-by-hop headers: they describe one connection, so the proxy does not pass them on
_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    number: int  # 0 for the first request the proxy received


Schedule = Callable[[Request], str]


def passing(request: Request) -> str:
    return PASS


def down(request: Request) -> str:
    """The store does not answer at all: every connection is dropped before the request reaches it."""
    return DROP_BEFORE


class Steady:
    """Each request meets one of ``faults`` with probability ``rate``, drawn from ``seed``: the same
    requests in the same order meet the same faults. ``only``: just the requests whose ``METHOD path``
    matches this regular expression (``"^PUT .*/_delta_log/0"``: commits) meet any; ``once``: a path
    meets one fault at most, so that the client's retry of it passes."""

    def __init__(self, rate: float, seed: int, faults: tuple[str, ...] = FAULTS, only: str = "",
                 once: bool = False) -> None:
        self.rate, self.faults, self.only, self.once = rate, faults, only, once
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.faulted: set[str] = set()

    def __call__(self, request: Request) -> str:
        if not re.search(self.only, f"{request.method} {request.path}"):
            return PASS
        with self.lock:
            if self.once and request.path in self.faulted or self.random.random() >= self.rate:
                return PASS
            self.faulted.add(request.path)
            return self.random.choice(self.faults)


class FaultProxy:
    """Serves on 127.0.0.1 (a port the kernel chooses) until ``stop()``; ``seen`` counts what each
    request met, by fault."""

    def __init__(self, upstream_port: int, schedule: Schedule = passing, delay_s: float = 1.0) -> None:
        self.upstream_port = upstream_port
        self.schedule = schedule
        self.delay_s = delay_s
        self.seen: Counter[str] = Counter()
        self._count = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def decide(self, method: str, path: str) -> str:
        with self._lock:
            request = Request(method, path, self._count)
            self._count += 1
        fault = self.schedule(request)
        with self._lock:
            self.seen[fault] += 1
        return fault

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(30)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as clients use a store: a drop then ends a pool's connection

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    parts = []
                    while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                    while self.rfile.readline().strip():  # trailers, up to the blank line
                        pass
                    return b"".join(parts)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _drop(self) -> None:
                """Reset the connection (SO_LINGER 0): the client sees it fail, not a clean end."""
                self.close_connection = True
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

            def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response_only(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _handle(self) -> None:
                body = self._body()
                fault = proxy.decide(self.command, self.path)
                if fault == DROP_BEFORE:
                    return self._drop()
                if fault in _ERRORS:
                    status, code, message = _ERRORS[fault]
                    error = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                             f'<Message>{message}</Message></Error>').encode()
                    return self._answer(status, [("Content-Type", "application/xml"),
                                                 ("Content-Length", str(len(error)))], error)
                if fault == DELAY:
                    time.sleep(proxy.delay_s)
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP | {"content-length"}}
                    upstream.request(self.command, self.path, body=body,
                                     headers={**headers, "Content-Length": str(len(body))})
                    response = upstream.getresponse()
                    answer = response.read()
                    status, received = response.status, response.getheaders()
                finally:
                    upstream.close()
                if fault == DROP_AFTER:
                    return self._drop()
                headers = [(k, v) for k, v in received if k.lower() not in _HOP | {"content-length"}]
                length = response.getheader("Content-Length") if self.command == "HEAD" else str(len(answer))
                self._answer(status, headers + ([("Content-Length", length)] if length is not None else []), answer)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        return Handler


def schedule_from(command: dict) -> Schedule:
    """The schedule a control line asks for."""
    kind = command["schedule"]
    if kind == "steady":
        return Steady(float(command["rate"]), int(command["seed"]), tuple(command.get("faults", FAULTS)),
                      command.get("only", ""), bool(command.get("once")))
    return {"pass": passing, "down": down}[kind]


def main() -> None:
    proxy = FaultProxy(int(sys.argv[1]), delay_s=float(sys.argv[2]) if len(sys.argv) > 2 else 1.0)
    print(proxy.port, flush=True)
    for line in sys.stdin:  # the test's end closes stdin: the proxy stops with it
        if line.strip():
            command = json.loads(line)
            if "schedule" in command:
                proxy.schedule = schedule_from(command)
            with proxy._lock:
                print(json.dumps(dict(proxy.seen)), flush=True)
    proxy.stop()


if __name__ == "__main__":
    sys.exit(main())
