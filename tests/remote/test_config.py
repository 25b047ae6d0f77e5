"""What ``router serve`` refuses before anything starts (router.remote.reach)."""

from __future__ import annotations

import pytest

from router.errors import Refusal
from router.remote import Listen, ReachConfig, check_config, parse_listen


def test_listen_addresses() -> None:
    assert parse_listen("192.168.1.20:8443") == Listen("192.168.1.20", 8443)
    assert parse_listen("[fd00::2]:8443").hostport == "[fd00::2]:8443"
    assert parse_listen("127.0.0.1:9000").loopback and not parse_listen("10.0.0.1:9000").loopback


@pytest.mark.parametrize("text", ["8443", ":8443", "host:", "host:99999", "0.0.0.0:8443", "[::]:8443", "h:x"])
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(Refusal) as refused:
        parse_listen(text)
    assert refused.value.code == "bad-listen"


@pytest.mark.parametrize(("config", "code"), [
    (ReachConfig(listen=(Listen("10.0.0.1", 8443),), behind_proxy=True), "plain-http-refused"),
    (ReachConfig(listen=(Listen("10.0.0.1", 8443),), tls_cert="c.pem"), "tls-files-bad"),
    (ReachConfig(tls_cert="c.pem", tls_key="k.pem"), "tls-files-bad"),
    (ReachConfig(behind_proxy=True, public_url="http://box.example"), "bad-proxy-url"),
])
def test_refused_configurations(config: ReachConfig, code: str) -> None:
    with pytest.raises(Refusal) as refused:
        check_config(config)
    assert refused.value.code == code and refused.value.message


def test_a_loopback_address_behind_a_proxy_is_fine() -> None:
    check_config(ReachConfig(listen=(Listen("127.0.0.1", 9000),), behind_proxy=True, public_url="https://box.example"))


def test_router_pair_without_a_router_that_serves_devices(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys
    from pathlib import Path

    env = {"PATH": "/usr/bin:/bin", "ROUTER_DATA_DIR": str(tmp_path / "data"), "XDG_RUNTIME_DIR": ""}
    router = str(Path(sys.executable).with_name("router"))
    done = subprocess.run([router, "pair"], env=env, capture_output=True, timeout=60)
    assert done.returncode == 2 and b"no-remote" in done.stderr
