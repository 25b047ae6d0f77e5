"""A phone on another network reaches the router: ``router serve --listen``
on a veth address in one network namespace, the phone (headless Chromium,
phone-sized, the router's CA in its NSS store; and an httpx client) in the
other. Both ends live in namespaces the test made (tests/support/netns.py).

One scenario (pair from the QR code the router made, see the board, send,
see the answer live; a page of another site in the same browser refused;
revoking closes the phone's open stream), and the refusals, each with its
code.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import attrs
import httpx
import pytest
import trio

from tests.remote.phone import emulate_phone, phone_chromium, trust_ca
from tests.support.netns import NetnsPair, netns_pair

ROUTER = str(Path(sys.executable).with_name("router"))
PORT = 8443
SESSION = "s-phone"
NETCLIENT = str(Path(__file__).with_name("netclient.py"))


@attrs.frozen
class Served:
    pair: NetnsPair
    env: dict[str, str]
    settings: Path
    socket: str
    stderr: Path

    @property
    def origin(self) -> str:
        return f"https://{self.pair.router_ip}:{PORT}"

    @property
    def ca(self) -> Path:
        return self.settings / "remote-ca.pem"

    async def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        done = await trio.run_process([ROUTER, *args], env=self.env, capture_stdout=True, capture_stderr=True,
                                      check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"router {' '.join(args)}: {done.returncode} {done.stderr.decode()}")
        return done

    async def phone_requests(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The answers to ``requests`` made from the phone's namespace."""
        done = await trio.run_process([*self.pair.exec(self.pair.phone_ns), sys.executable, NETCLIENT, "--ca",
                                       str(self.ca), "--netns", self.pair.phone_ns], stdin=json.dumps(requests).encode(), capture_stdout=True,
                                      capture_stderr=True, check=False)
        assert done.returncode == 0, done.stderr.decode()
        return json.loads(done.stdout)

    async def messages(self) -> str:
        """The session's transcript as text, read over the private socket."""
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=self.socket),
                                     base_url="http://localhost") as client:
            return (await client.get(f"/sessions/{SESSION}/messages")).text

    def log(self) -> str:
        return self.stderr.read_text()


@asynccontextmanager
async def served(tmp_path: Path, pair: NetnsPair, world: dict[str, str] | None = None) -> AsyncIterator[Served]:
    """``router serve --listen`` in the router's namespace, with data and
    settings of its own (the router's CA is made there); its run directory
    its own, or ``world``'s environment (another board's run directory and
    home) laid over this process's."""
    env = {**os.environ, **(world or {}), "ROUTER_DATA_DIR": str(tmp_path / "data"),
           "ROUTER_SETTINGS_DIR": str(tmp_path / "settings")}
    if world is None:
        runtime = tmp_path / "run"
        runtime.mkdir(mode=0o700)
        env["XDG_RUNTIME_DIR"] = str(runtime)
    stderr = tmp_path / "serve.err"
    with stderr.open("wb") as err:
        process = await trio.lowlevel.open_process(
            [*pair.exec(pair.router_ns), ROUTER, "serve", "--port", "0", "--listen", f"{pair.router_ip}:{PORT}",
             "--log-level", "info"], env=env, stdout=subprocess.PIPE, stderr=err)
    try:
        assert process.stdout is not None
        out = b""
        with trio.fail_after(60):
            while b"reachable at" not in out:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, f"router serve ended: {stderr.read_text()}"
                out += chunk
        socket = out.decode().split("local ", 1)[1].split(")", 1)[0]
        yield Served(pair=pair, env=env, settings=tmp_path / "settings", socket=socket, stderr=stderr)
    finally:
        with trio.CancelScope(shield=True):
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(20):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


def decode_qr(png: Path) -> str:
    """The text of the QR code in ``png`` (zbarimg, Debian's zbar-tools)."""
    if shutil.which("zbarimg") is None:
        reason = "no zbarimg (Debian package zbar-tools; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    done = subprocess.run(["zbarimg", "--quiet", "--raw", str(png)], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


@asynccontextmanager
async def paired_phone(router: Served, pair: NetnsPair, tmp_path: Path) -> AsyncIterator[Any]:
    """A phone in the pair's other namespace (Chromium at 390×844 with the
    router's CA), paired from the QR code ``router pair`` made (decoded with
    zbarimg), on the page's board: its page."""
    qr = tmp_path / "pair.png"
    paired = json.loads((await router.cli("pair", "--json", "--png", str(qr))).stdout)
    url = decode_qr(qr)
    assert url == paired["url"] and url.startswith(f"{router.origin}/pair#")
    home = tmp_path / "phone-home"
    trust_ca(home, router.ca)
    async with phone_chromium(pair.exec(pair.phone_ns), home) as browser:
        phone = await browser.open("about:blank")
        await emulate_phone(phone)
        await phone.send("Page.navigate", {"url": url})
        await phone.wait_for(f"location.origin === {json.dumps(router.origin)} && location.pathname "
                             "=== '/' && document.readyState === 'complete'", timeout=60)
        yield phone


EVIL_FETCH = """<!doctype html><title>evil</title><script>
const target = %(origin)s;
window.results = {};
fetch(target + '/sessions/%(session)s/messages', {method: 'POST', mode: 'no-cors', credentials: 'include',
  headers: {'content-type': 'text/plain'}, body: JSON.stringify({text: 'evil fetch'})})
  .then(() => { results.post = 'opaque'; }, (e) => { results.post = 'failed'; });
fetch(target + '/sessions', {credentials: 'include'})
  .then((r) => r.text().then((t) => { results.read = t; }), (e) => { results.read = 'failed'; });
const stream = new EventSource(target + '/board/live', {withCredentials: true});
stream.onerror = () => { results.stream = stream.readyState; stream.close(); };
stream.onmessage = (e) => { results.streamData = e.data; };
</script>"""

EVIL_FORM = """<!doctype html><title>evil form</title>
<form method="POST" enctype="text/plain" action="%(origin)s/sessions/%(session)s/messages">
<input name='{"text": "evil form", "x": "' value='"}'></form>
<script>document.forms[0].submit();</script>"""


async def test_a_phone_pairs_from_the_qr_code_sends_and_is_revoked(tmp_path: Path) -> None:
    with netns_pair() as pair:
        async with served(tmp_path, pair) as router:
            await router.cli("launch", SESSION)
            qr = tmp_path / "pair.png"
            paired = json.loads((await router.cli("pair", "--json", "--png", str(qr))).stdout)
            url = decode_qr(qr)
            assert url == paired["url"] and url.startswith(f"{router.origin}/pair#")
            code = url.split("#", 1)[1]
            home = tmp_path / "phone-home"
            trust_ca(home, router.ca)
            evil = tmp_path / "evil"
            evil.mkdir()
            values = {"origin": json.dumps(router.origin), "session": SESSION}
            (evil / "fetch.html").write_text(EVIL_FETCH % values)
            (evil / "form.html").write_text(EVIL_FORM % {**values, "origin": router.origin})
            other_site = await trio.lowlevel.open_process(
                [*pair.exec(pair.phone_ns), sys.executable, "-m", "http.server", "8080", "--bind", "127.0.0.1",
                 "--directory", str(evil)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                async with phone_chromium(pair.exec(pair.phone_ns), home) as browser:
                    phone = await browser.open("about:blank")
                    await emulate_phone(phone)
                    await phone.send("Page.navigate", {"url": url})
                    # The pairing page posts the code and opens the board.
                    await phone.wait_for(f"location.origin === {json.dumps(router.origin)} && location.pathname "
                                         "=== '/' && document.readyState === 'complete'", timeout=60)
                    await phone.wait_for(f"document.body.innerText.includes({json.dumps(SESSION)})", timeout=30)
                    assert await phone.evaluate("document.cookie") == ""  # HttpOnly
                    assert await phone.evaluate("[screen.width, navigator.maxTouchPoints > 0]") == [390, True]
                    devices = json.loads((await router.cli("devices", "--json")).stdout)
                    assert [each["name"] for each in devices] == ["Android Chrome"]
                    # Live view open, then a send from the phone; the answer arrives on the stream.
                    await phone.evaluate(f"""window.live = []; window.stream = new EventSource(
                        '/sessions/{SESSION}/live'); stream.onmessage = (e) => live.push(e.data); 0""")
                    await phone.wait_for("stream.readyState === 1")
                    status = await phone.evaluate(f"""fetch('/sessions/{SESSION}/messages', {{method: 'POST',
                        headers: {{'content-type': 'application/json'}},
                        body: JSON.stringify({{text: 'hello from the phone'}})}}).then((r) => r.status)""")
                    assert status == 200
                    await phone.wait_for("live.some((d) => d.includes('echo: hello from the phone'))")

                    # Another site in the same browser: refused, whatever it tries.
                    other = await browser.open("http://127.0.0.1:8080/fetch.html")
                    await other.wait_for("results.post && results.read && results.stream !== undefined")
                    assert await other.evaluate("results.read") == "failed"  # it cannot read
                    assert await other.evaluate("results.streamData") is None
                    await other.goto("http://127.0.0.1:8080/form.html")
                    refused = f"refused POST /sessions/{SESSION}/messages on the remote listener: bad-origin"
                    with trio.fail_after(20):
                        while router.log().count(refused) < 2:  # the fetch's and the form's
                            await trio.sleep(0.05)
                    assert "refused GET /board/live on the remote listener: bad-origin" in router.log()
                    assert "refused GET /sessions on the remote listener: bad-origin" in router.log()
                    transcript = await router.messages()
                    assert "hello from the phone" in transcript and "evil" not in transcript

                    # Revoked: the open stream closes, the next request is refused.
                    await router.cli("devices", "revoke", "Android Chrome")
                    await phone.wait_for("stream.readyState === 2", timeout=10)
                    assert await phone.evaluate("fetch('/sessions').then((r) => r.status)") == 401
            finally:
                other_site.kill()
                await other_site.wait()
            assert code not in router.log(), "the pairing code never reaches the log"


async def test_refusals_from_another_network(tmp_path: Path) -> None:
    with netns_pair() as pair:
        async with served(tmp_path, pair) as router:
            first = json.loads((await router.cli("pair", "--json")).stdout)["code"]
            second = json.loads((await router.cli("pair", "--json")).stdout)["code"]
            origin = router.origin
            pair_with = lambda code: {"method": "POST", "url": f"{origin}/pair", "json": {"code": code},  # noqa: E731
                                      "headers": {"origin": origin, "user-agent": "curl/8"}}
            none, paired, used, untrusted, plain = await router.phone_requests([
                {"method": "GET", "url": f"{origin}/sessions"},
                pair_with(first),
                pair_with(first),
                {"method": "GET", "url": f"{origin}/healthz", "trust": "system"},
                {"method": "GET", "url": f"http://{pair.router_ip}:{PORT}/healthz"},
            ])
            assert (none["status"], none["body"]["error"]) == (401, "no-credential")
            assert paired["status"] == 201 and "HttpOnly" in paired["setCookie"] and "Secure" in paired["setCookie"]
            assert "SameSite=Strict" in paired["setCookie"]
            assert (used["status"], used["body"]["error"]) == (410, "pairing-code-used")
            assert untrusted["kind"] == "ConnectError" and "CERTIFICATE_VERIFY_FAILED" in untrusted["error"]
            assert "status" not in plain  # plain HTTP gets no answer from a TLS address
            token = paired["body"]["token"]
            bearer = {"authorization": f"Bearer {token}"}
            ok, foreign, cookie_without_origin = await router.phone_requests([
                {"method": "GET", "url": f"{origin}/sessions", "headers": bearer},
                {"method": "GET", "url": f"{origin}/sessions", "headers": {**bearer, "origin": "https://evil.example"}},
                {"method": "POST", "url": f"{origin}/sessions", "json": {}, "cookies": {"router-device": token}},
            ])
            assert ok["status"] == 200
            assert (foreign["status"], foreign["body"]["error"]) == (403, "bad-origin")
            assert (cookie_without_origin["status"], cookie_without_origin["body"]["error"]) == (403, "no-origin")
            table = (await router.cli("devices")).stdout.decode()
            assert "Device browser" in table and "active" in table
            renamed = await router.cli("devices", "rename", "Device browser", "my curl")
            assert renamed.stdout.decode().startswith("renamed my curl")
            revoked_out = await router.cli("devices", "revoke", "my curl")
            assert revoked_out.stdout.decode().startswith("revoked my curl")
            unknown = await router.cli("devices", "revoke", "nobody", check=False)
            assert unknown.returncode == 1 and b"unknown-device" in unknown.stderr
            wrong = [pair_with(f"wrong-guess-{n:02d}-xxxxxxxxxx") for n in range(5)]
            *guesses, revoked, locked = await router.phone_requests([
                *wrong, {"method": "GET", "url": f"{origin}/sessions", "headers": bearer}, pair_with(second)])
            assert [each["body"]["error"] for each in guesses] == ["bad-pairing-code"] * 5
            assert (revoked["status"], revoked["body"]["error"]) == (401, "bad-credential")
            assert (locked["status"], locked["body"]["error"]) == (429, "pairing-locked")
            refused_pair = await router.cli("pair", check=False)
            assert refused_pair.returncode == 1 and b"pairing-locked" in refused_pair.stderr
        # A non-loopback address without TLS is refused before anything starts.
        done = await trio.run_process(
            [*pair.exec(pair.router_ns), ROUTER, "serve", "--port", "0", "--listen", f"{pair.router_ip}:{PORT}",
             "--behind-proxy"], env=router.env, capture_stdout=True, capture_stderr=True, check=False)
        assert done.returncode == 2 and b"plain-http-refused" in done.stderr
