"""An adapter that answers whether it can see the daemon's token, at import
and while it runs (it must not, either time)."""

from __future__ import annotations

import json
import os

from wire.container import AdapterInfo, Done

SEEN_AT_IMPORT = "CF_HARNESS_TOKEN" in os.environ


class _Session:
    async def run(self, turn):
        return Done(text=json.dumps({"import": SEEN_AT_IMPORT, "run": "CF_HARNESS_TOKEN" in os.environ}))

    async def close(self):
        pass


class EnvCheck:
    info = AdapterInfo(id="env-check", version="1", capabilities=())

    async def open(self, context):
        return _Session()


adapter = EnvCheck()
