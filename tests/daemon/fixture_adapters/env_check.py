"""An adapter that answers whether it can see the daemon's token, at import
and while it runs (it must not, either time)."""

from __future__ import annotations

import json
import os
import subprocess

from wire.container import AdapterInfo, Done

SEEN_AT_IMPORT = "CF_HARNESS_TOKEN" in os.environ


def _child_sees() -> bool:
    """Whether a process the adapter starts finds the token in /proc: its
    own environment or its parent's (the daemon's)."""
    done = subprocess.run(
        ["sh", "-c", 'cat /proc/self/environ; echo; cat "/proc/$PPID/environ"'],
        capture_output=True,
    )
    return b"CF_HARNESS_TOKEN=" in done.stdout or b"test-token" in done.stdout


class _Session:
    async def run(self, turn):
        return Done(text=json.dumps({
            "import": SEEN_AT_IMPORT, "run": "CF_HARNESS_TOKEN" in os.environ, "child": _child_sees(),
            "parent": os.getpid(),
        }))

    async def close(self):
        pass


class EnvCheck:
    info = AdapterInfo(id="env-check", version="1", capabilities=())

    async def open(self, context):
        return _Session()


adapter = EnvCheck()
