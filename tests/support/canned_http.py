"""A canned HTTP server for the tests of a client's refusals: a real socket
(TCP, or a Unix socket as a router's private one), answering each
``METHOD path`` with a fixed status and JSON body, or holding the answer
back until the server stops (a router that does not answer in time)."""

from __future__ import annotations

import contextlib
import http.server
import json
import socketserver
import threading
from typing import Any, Iterator

#: The answer that is never sent (the request waits until the server stops).
HOLD = object()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Any

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        found = self.server.answers.get((self.command, self.path))
        if found is HOLD:
            self.server.released.wait()
            return
        status, body = found if found is not None else (404, {"error": "not-found", "message": "no such route"})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:  # quiet (and a Unix peer has no address)
        pass


class _Tcp(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


class _Unix(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextlib.contextmanager
def canned(answers: dict[tuple[str, str], Any], *, unix: str | None = None) -> Iterator[str]:
    """Serve ``answers`` (``(method, path)``: ``(status, body)`` or
    :data:`HOLD`) on a TCP port of 127.0.0.1 (its URL is yielded) or on the
    Unix socket ``unix`` (its path is yielded)."""
    server: Any = _Unix(unix, _Handler) if unix is not None else _Tcp(("127.0.0.1", 0), _Handler)
    server.answers = answers
    server.released = threading.Event()
    thread = threading.Thread(target=server.serve_forever, name="canned http", daemon=True)
    thread.start()
    try:
        yield unix if unix is not None else f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()
        thread.join()
