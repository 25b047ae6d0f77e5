"""apprise with real servers: ``mailto://`` to an SMTP server the test runs
(aiosmtpd) and ``json://`` to an HTTP receiver the test runs, both on
loopback; each message arrives once. A URL apprise cannot read is a clear
configuration error, masked, and the others still go."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest
import trio

from tests.notify.conftest import Rig, waiting_ask, write_settings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp() -> Iterator[tuple[int, list[Any]]]:
    from aiosmtpd.controller import Controller

    got: list[Any] = []

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            got.append(envelope)
            return "250 OK"

    port = _free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, got
    finally:
        controller.stop()


@pytest.fixture
def receiver() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    got: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("content-length", "0"))
            got.append(json.loads(self.rfile.read(length)))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], got
    finally:
        server.shutdown()
        server.server_close()


async def test_mail_and_json_arrive_once_each(rig: Rig, smtp: Any, receiver: Any) -> None:
    smtp_port, mails = smtp
    http_port, posts = receiver
    urls = [f"mailto://127.0.0.1:{smtp_port}?to=me@example.org&from=router@example.org",
            f"json://127.0.0.1:{http_port}/hook", "notaservice://secret-token@example.org/x"]
    write_settings(rig.settings_dir, notifiers=["apprise"], notify={"notifiers": {"apprise": {"urls": urls}}})
    rig.service.page_url = lambda: "https://box.example/router/"  # as a phone reaches the page
    await rig.log.call(rig.log.put_ask, waiting_ask("ask-9", "s-9"))
    with trio.fail_after(30):
        while True:
            events = await rig.events()
            receipts = events[0]["receipts"] if events else []
            if len(receipts) == 2 and all(r["outcome"] == "sent" for r in receipts):
                break
            await trio.sleep(0.02)
    assert len(mails) == 1 and mails[0].rcpt_tos == ["me@example.org"]
    assert "Bash" in mails[0].content.decode(errors="replace")
    assert len(posts) == 1 and "Bash" in posts[0]["title"] and "ls" in posts[0]["message"]
    assert "https://box.example/router/?session=s-9" in posts[0]["message"]
    # Receipts name destinations by a masked label, never the URL.
    text = json.dumps(events)
    assert f"{smtp_port}?to" not in text and "hook" not in text
    problems = await rig.service.problems()
    assert [p.code for p in problems] == ["apprise-bad-url"]
    assert "secret-token" not in json.dumps([p.to_json() for p in problems])
    view = await rig.service.view()
    assert "secret-token" not in json.dumps(view) and str(http_port) not in json.dumps(view)
    # Sent once: nothing more goes out on the next passes.
    await rig.service.drain()
    assert len(mails) == 1 and len(posts) == 1


async def test_an_unreachable_service_fails_its_receipt_and_is_shown(rig: Rig) -> None:
    port = _free_port()  # nothing listens there
    write_settings(rig.settings_dir, notifiers=["apprise"],
                   notify={"notifiers": {"apprise": {"urls": [f"json://127.0.0.1:{port}/x"]}}})
    await rig.log.call(rig.log.put_ask, waiting_ask("ask-10", "s-10"))
    with trio.fail_after(30):
        while True:
            events = await rig.events()
            receipts = events[0]["receipts"] if events else []
            if receipts and receipts[0]["outcome"] == "failed":
                break
            await trio.sleep(0.02)
    assert "connection" in receipts[0]["detail"].lower()
    view = await rig.service.view()
    (destination,) = view["destinations"]
    assert (destination["last_error"]["error"], destination["last_error"]["notifier"]) == ("send-failed", "apprise")
