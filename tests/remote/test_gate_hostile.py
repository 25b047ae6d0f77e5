"""The gate (router.remote.gate) on hostile headers: whatever a peer sends
in Host, Origin, Cookie, Authorization and the forwarded headers, the gate
either refuses with one of its codes or lets the app run; it never raises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from hypothesis import given, settings, strategies as st

from router.remote import DeviceStore, Gate, Listen, Reach, ReachConfig

NAMES = [b"host", b"origin", b"cookie", b"authorization", b"x-forwarded-host", b"x-forwarded-proto",
         b"x-forwarded-prefix", b"x-forwarded-for"]
VALUES = st.one_of(
    st.binary(max_size=80),
    st.sampled_from([b"", b"10.1.2.3:8443", b"https://10.1.2.3:8443", b"router-device=", b"router-device=\"x\"",
                     b"Bearer ", b"Bearer " + b"a" * 43, b"/router", b"//evil", b"null", b"a=b; router-device=zz;",
                     b"https://box.example"]),
)
HEADERS = st.lists(st.tuples(st.sampled_from(NAMES), VALUES), max_size=8)


def _run(tmp: Path, headers: list[tuple[bytes, bytes]], listener: str, client: str, path: str, method: str) -> None:
    store = DeviceStore.open(None, tmp)
    reach = Reach(ReachConfig(listen=(Listen("10.1.2.3", 8443),), behind_proxy=False), settings_dir=tmp,
                  devices=store)
    if listener == "proxy":
        reach = Reach(ReachConfig(listen=(Listen("127.0.0.1", 8443),), behind_proxy=True,
                                  public_url="https://box.example"), settings_dir=tmp, devices=store)
    ran: list[dict] = []
    sent: list[dict] = []

    async def app(scope: dict, receive: Any, send: Any) -> None:
        ran.append(scope)

    async def send(message: dict) -> None:
        sent.append(message)

    gate = Gate(app, reach, listener="loopback" if listener == "proxy" else listener,
                open_paths=lambda: frozenset({"/", "/pair"}))
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "client": (client, 5000),
             "headers": headers}
    try:
        trio.run(gate, scope, None, send)
    finally:
        store.close()
    if ran:
        assert not sent
        assert type(ran[0]["path"]) is str
    else:
        assert sent[0]["status"] in (401, 403, 421)


@settings(max_examples=150, deadline=None)
@given(HEADERS, st.sampled_from(["remote", "loopback", "proxy"]), st.sampled_from(["127.0.0.1", "10.1.2.4", ""]),
       st.sampled_from(["/", "/pair", "/sessions", "/pair/ca.pem"]), st.sampled_from(["GET", "POST", "PATCH"]))
def test_the_gate_refuses_or_passes_never_raises(tmp_path_factory: Any, headers: list[tuple[bytes, bytes]],
                                                 listener: str, client: str, path: str, method: str) -> None:
    _run(tmp_path_factory.mktemp("gate"), headers, listener, client, path, method)
