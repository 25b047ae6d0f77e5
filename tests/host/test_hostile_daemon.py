"""Daemons that misbehave on purpose, over a real socket (the fake daemon
of ``tests/host/fake_daemon.py``), against the host's link: what the fault
campaign found (docs/reliability.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.host.memory_probe import REPO

MIB = 1 << 20
LIMIT_MIB = 64  # router.host.link.MAX_MESSAGE_SIZE


def probe(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "tests.host.memory_probe", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_over_limit_messages_repeated_do_not_grow_the_host() -> None:
    """A daemon (its own process) sends a 65 MiB message on every
    connection: each is refused with 1009 as it arrives, and what was
    received of it is let go before the next connection. Before, the host's
    resident memory grew by about 40 MiB a connection (417 MiB after ten;
    1.88 GB in the campaign): the refused parts stayed alive, through the
    link's last error, until the next message's parts were allocated."""
    figures = probe("over", "65", "10")
    assert figures["connections"] >= 10
    assert figures["after_rss"] - figures["second_rss"] < LIMIT_MIB, figures
    assert figures["after_hwm"] - figures["before_hwm"] < 2 * LIMIT_MIB, figures
