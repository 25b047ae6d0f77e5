"""Two network namespaces joined by a veth pair, for "another device" tests.

:func:`netns_pair` makes namespaces ``<prefix>a`` (the router's side) and
``<prefix>b`` (the phone's side), a veth pair with one end in each, the
addresses ``10.<x>.<y>.1/24`` and ``.2/24`` on them and ``lo`` up in both;
both ends live in namespaces the test made, so no packet ever leaves for an
address outside them (docs: /work/shared/notes/reach.md, "Network
namespaces"). Everything is deleted on exit, whatever happened.

Needs root and ``ip`` (iproute2): without them the tests skip with the
reason (fail under CI, ``ROUTER_REQUIRE_NETNS=1``).

A program run in a namespace (``ip netns exec NAME …``) still shares the
file system with the test: files and Unix sockets cross, packets do not.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from contextlib import contextmanager
from typing import Iterator

import attrs
import pytest


@attrs.frozen
class NetnsPair:
    router_ns: str
    phone_ns: str
    router_ip: str
    phone_ip: str

    def exec(self, ns: str) -> list[str]:
        """The argv prefix that runs a command in ``ns``."""
        return ["ip", "netns", "exec", ns]


def require_netns() -> None:
    reason = None
    if os.geteuid() != 0:
        reason = "network namespaces need root"
    elif shutil.which("ip") is None:
        reason = "no `ip` (Debian package iproute2)"
    if reason is not None:
        if os.environ.get("ROUTER_REQUIRE_NETNS") == "1" or os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@contextmanager
def netns_pair() -> Iterator[NetnsPair]:
    require_netns()
    tag = secrets.token_hex(3)
    a, b = f"rt{tag}a", f"rt{tag}b"
    veth_a, veth_b = f"v{tag}a", f"v{tag}b"
    net = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(250)}"
    made: list[str] = []
    try:
        for ns in (a, b):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("link", "add", veth_a, "type", "veth", "peer", "name", veth_b)
        _ip("link", "set", veth_a, "netns", a)
        _ip("link", "set", veth_b, "netns", b)
        for ns, veth, host in ((a, veth_a, 1), (b, veth_b, 2)):
            _ip("-n", ns, "addr", "add", f"{net}.{host}/24", "dev", veth)
            _ip("-n", ns, "link", "set", veth, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield NetnsPair(router_ns=a, phone_ns=b, router_ip=f"{net}.1", phone_ip=f"{net}.2")
    finally:
        for ns in made:  # deleting a namespace deletes the veth end in it, and so the pair
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
