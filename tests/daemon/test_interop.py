"""The same scenarios against our daemon and the reference daemon (npm
``agents@0.32.0``), as real processes over real sockets.

Each scenario asserts the reference's behaviour by hand
(``test_scenario[kind-…]``), and ``test_daemons_agree[…]`` runs it against
both and compares what every connection received, after masking the
timestamps (``createdAt``).
"""

from __future__ import annotations

import httpx
import pytest
import trio

from tests.daemon.hosts import mask
from tests.daemon.scenarios import SCENARIOS, Transcript
from tests.support.daemons import KINDS, spawn_daemon


def split(transcript: Transcript) -> dict[str, tuple[list, list]]:
    """Per connection: (frames in order, other messages in order), masked."""
    return {
        name: (
            [mask(m) for m in messages if m["type"] == "frame"],
            [mask(m) for m in messages if m["type"] != "frame"],
        )
        for name, messages in transcript.items()
    }


@pytest.mark.parametrize("name", list(SCENARIOS))
@pytest.mark.parametrize("kind", KINDS)
async def test_scenario(kind, name):
    async with spawn_daemon(kind) as daemon:
        await SCENARIOS[name](daemon)


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_daemons_agree(name):
    transcripts = {}
    for kind in KINDS:
        async with spawn_daemon(kind) as daemon:
            transcripts[kind] = await SCENARIOS[name](daemon)
    ours, reference = split(transcripts["ours"]), split(transcripts["reference"])
    assert ours.keys() == reference.keys()
    for connection in ours:
        assert ours[connection][0] == reference[connection][0], f"frames on {connection}"
        assert ours[connection][1] == reference[connection][1], f"other messages on {connection}"


@pytest.mark.parametrize("kind", KINDS)
async def test_health_check_needs_no_token(kind):
    async with spawn_daemon(kind) as daemon, httpx.AsyncClient() as client:
        with trio.fail_after(20):
            health = await client.get(f"{daemon.http_url}/healthz")
            other = await client.get(f"{daemon.http_url}/sessions/x")
            again = await client.get(f"{daemon.http_url}/healthz")  # same connection, kept alive
    assert (health.status_code, health.text, health.headers["content-type"]) == (200, "ok", "text/plain")
    assert other.status_code == 404
    assert again.status_code == 200
