"""Support for the limit tests: the main job as ``router serve`` assembles it
(in-process, the API on a loopback port), ``router limits`` through the real
command dispatcher, and reading the live view's server-sent events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import attrs
import httpx
import pytest

from router.cli import main
from router.serve import JobConfig, MainJob


@attrs.define
class Running:
    job: MainJob
    client: httpx.AsyncClient
    data: Path
    settings: Path

    @property
    def router(self) -> Any:
        return self.job.router

    async def send(self, session: str, text: str, event_id: str, **extra: Any) -> httpx.Response:
        return await self.client.post(
            f"/sessions/{session}/messages", json={"text": text, "eventId": event_id, **extra}
        )

    async def meter(self, session: str) -> Any:
        return (await self.router.session(session)).brackets


def job_config(tmp: Path, **options: Any) -> JobConfig:
    return JobConfig(data_dir=tmp / "data", settings_dir=tmp / "settings", port=0, **options)


class Limits:
    """``router limits ...`` against one settings directory, in this process."""

    def __init__(self, settings: Path, capsys: pytest.CaptureFixture[str], tmp: Path) -> None:
        self.settings = settings
        self.capsys = capsys
        self.tmp = tmp

    def run(self, *argv: str, patch: Any = None) -> tuple[int, str, str]:
        args = list(argv)
        if patch is not None:
            file = self.tmp / "limits-patch.json"
            file.write_text(json.dumps(patch))
            args += ["--file", str(file)]
        self.capsys.readouterr()
        status = main(["limits", "--settings", str(self.settings), *args])
        out, err = self.capsys.readouterr()
        return status, out, err

    def revision(self) -> str:
        status, out, err = self.run("--json")
        assert status == 0, err
        return json.loads(out)["revision"]

    def set(self, limits: Any) -> None:
        status, _, err = self.run("set", patch={"revision": self.revision(), "limits": limits})
        assert status == 0, err

    def report(self, records: Path) -> dict[str, Any]:
        status, out, err = self.run("--records", str(records), "--json")
        assert status == 0, err
        return {".".join(entry["path"]): entry for entry in json.loads(out)["report"]}


async def live_items(
    response: httpx.Response, until: Callable[[dict[str, Any]], bool]
) -> AsyncIterator[dict[str, Any]]:
    """The live view's events (``snapshot`` first), until one answers ``until``."""
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            item = json.loads(line[len("data: "):])
            yield item
            if until(item):
                return


def write_plugins(settings: Path, plugins: dict[str, Any]) -> None:
    """plugins.json by hand, as a person would write it."""
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "plugins.json").write_text(json.dumps({"plugins": plugins, "options": {}}))
