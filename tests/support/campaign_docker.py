"""The fault campaign's Docker phase (docs/reliability.md): ``router serve
--launcher docker`` with a few container sessions (the echo adapter in a
container of the project's image each), deliveries in flight through its
HTTP API, every one resent with its event id until answered, while the
sessions' containers are faulted one at a time, 0.3–1.5 s apart:

- ``kill``: ``docker kill`` (SIGKILL);
- ``rm``: ``docker rm -f`` (killed and removed at once);
- ``pause``: ``docker pause`` for 1–4 s, then ``docker unpause``;
- ``restart``: ``docker restart --time 1`` (SIGTERM, then the same
  container started again on its own).

Then the record (:func:`tests.support.campaign.judge` for each session,
and each transcript in the order its deliveries were sent), a resend of
every delivery (answered from the record, with the same answer), the
router's exit and the sessions stopped. What each fault did to the session
(a new container, the same one, how long until its daemon ran again) is in
the row's ``cases``.

Only this phase's containers are ever touched: the launcher labels
everything it makes with ``router.test=<a label of this run>`` (its
``labels`` option), the faults pick among the running containers carrying
it, and the phase removes whatever carries it on every way out. The engine
is shared with other tests.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from random import Random
from typing import Any

import trio

from tests.support.campaign import HANG, PHASE_DEADLINE, FaultRow, judge, rng_for

PHASE = "Docker: session containers killed, removed, paused, restarted"
#: The fault kinds, each at least once in a run of four or more.
KINDS = ("kill", "rm", "pause", "restart")
#: Container sessions (a container each, the echo adapter in it).
SESSIONS = ("dk0", "dk1", "dk2")
#: What each delivery asks the echo adapter: quick and slow turns, so a
#: fault lands both between turns and inside one.
TEXTS = ("{s} {n}", "slow 100 {s} {n}", "slow 400 {s} {n}", "slow 900 {s} {n}")
#: Seconds a session's daemon must run in the faulted container before the
#: fault is said to have left it there.
STABLE = 2.0


def docker_missing() -> str | None:
    """Why this phase cannot run here (no client, no engine, no image), or None."""
    from tests.support.docker import DockerUnavailable, engine_version

    try:
        engine_version()
    except DockerUnavailable as exc:
        return f"skipped: no Docker engine ({exc})"
    return None


def _plugins(label: str) -> dict[str, Any]:
    from tests.support.docker import TEST_LABEL

    return {"plugins": {"harness": ["echo"], "channel": ["cli", "webui"], "search-source": "harness-builtin",
                        "launcher": "docker"},
            "options": {"launcher": {"docker": {"labels": {TEST_LABEL: label}}}}}


def _ours(label: str) -> dict[str, str]:
    """The running containers carrying ``label`` (only those: the engine
    is shared), by id, with the session each runs."""
    from tests.support.docker import TEST_LABEL, docker

    done = docker("ps", "--no-trunc", "--filter", f"label={TEST_LABEL}={label}",
                  "--format", '{{.ID}} {{.Label "router.session"}}', check=False)
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


class _Senders:
    """Each session's deliveries, one at a time (the API sends with
    ``whenBusy: "steer"``: two at once would share a turn), each resent with
    its event id until it is answered; new ones until :attr:`enough`."""

    def __init__(self, row: FaultRow, client: Any, rng: Random) -> None:
        self.row, self.client, self.rng = row, client, rng
        self.expected: dict[str, dict[str, str]] = {session: {} for session in SESSIONS}
        self.answers: dict[str, dict] = {}
        self.enough = trio.Event()
        self.number = 0

    async def run(self, session: str, least: int) -> None:
        sent = 0
        while not self.enough.is_set() or sent < least:
            self.number += 1
            sent += 1
            event_id = f"{session}-{self.number}"
            self.expected[session][event_id] = self.rng.choice(TEXTS).format(s=session, n=self.number)
            with trio.move_on_after(PHASE_DEADLINE * 2):
                await self.until_answered(session, event_id)

    async def until_answered(self, session: str, event_id: str) -> None:
        import httpx

        text = self.expected[session][event_id]
        while event_id not in self.answers:
            try:
                response = await self.client.post(f"/sessions/{session}/messages",
                                                  json={"text": text, "eventId": event_id, "wait": True})
            except httpx.HTTPError as exc:
                self.row.refused(f"connection: {type(exc).__name__}")
                await trio.sleep(0.3)
                continue
            body = _json(response)
            reply = body.get("reply") if response.status_code == 200 else None
            if isinstance(reply, dict):
                self.answers[event_id] = reply
                if reply.get("status") != "done" and len(self.row.notes) < 8:
                    self.row.notes.append(f"{event_id}: answered {reply}")
                return
            code = body.get("error") or f"status-{response.status_code}"
            self.row.refused(f"{response.status_code} {code}")
            if code == "session-stopped":
                self.row.stopped = (self.row.stopped or 0) + 1
                if len(self.row.notes) < 8:
                    self.row.notes.append(f"{session} stopped: {str(body.get('message'))[:200]}")
                with contextlib.suppress(httpx.HTTPError):
                    await self.client.post(f"/sessions/{session}/resume")
            await trio.sleep(0.3)


def _json(response: Any) -> dict:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


async def _daemons(client: Any) -> dict[str, dict]:
    """Each session's ``daemon`` in ``GET /sessions`` (empty on a failure)."""
    import httpx

    try:
        response = await client.get("/sessions", params={"scope": "router"})
    except httpx.HTTPError:
        return {}
    return {item["id"]: item.get("daemon") or {} for item in _json(response).get("sessions", [])}


async def _fault(kind: str, container: str, rng: Random) -> bool:
    """One fault on ``container``; whether docker carried it out (the
    container may have gone on its own meanwhile)."""
    from tests.support.docker import docker

    def run(*args: str) -> bool:
        return docker(*args, check=False, timeout=60).returncode == 0

    if kind == "kill":
        return await trio.to_thread.run_sync(run, "kill", container)
    if kind == "rm":
        return await trio.to_thread.run_sync(run, "rm", "-f", container)
    if kind == "restart":
        return await trio.to_thread.run_sync(run, "restart", "--time", "1", container)
    if not await trio.to_thread.run_sync(run, "pause", container):
        return False
    try:
        await trio.sleep(rng.uniform(1.0, 4.0))
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(run, "unpause", container)
    return True


async def _afterwards(client: Any, session: str, container: str, kind: str) -> str:
    """What became of ``session``'s daemon after a fault on ``container``,
    and how soon: running in a new container (what a kill, a removal or a
    restart should give: the router learns of it from ``docker wait``, and
    lists the old container as running until it has stopped and removed
    it), or, after a pause, in the same one (for :data:`STABLE` seconds on
    end); else its state after :data:`HANG` × 3."""
    started = time.monotonic()
    since: float | None = None
    daemon: dict = {}
    with trio.move_on_after(HANG * 3):
        while True:
            daemon = (await _daemons(client)).get(session, {})
            now = time.monotonic()
            if daemon.get("state") == "running" and daemon.get("container") != container:
                return f"running in a new container within {_bucket(now - started)}"
            since = (since or now) if daemon.get("state") == "running" else None
            if kind == "pause" and since is not None and now - since >= STABLE:
                return f"running in the same container within {_bucket(since - started)}"
            await trio.sleep(0.1)
    same = " (the same container)" if daemon.get("container") == container else ""
    return f"after {HANG * 3:g} s {daemon.get('state')}{same}: {str(daemon.get('reason'))[:120]}"


def _bucket(seconds: float) -> str:
    for bound in (1, 2, 5, 10, 30):
        if seconds < bound:
            return f"{bound} s"
    return f"{HANG * 3:g} s"


async def _faults(row: FaultRow, rng: Random, client: Any, label: str, target: int,
                  outcomes: dict[str, Counter], router: trio.Process) -> None:
    """``target`` faults, one at a time, each on a random running container
    of this phase (the first four one of each kind); none begun after the
    phase's bound, nor once the router is gone."""
    until = trio.current_time() + PHASE_DEADLINE + 10 * target
    while row.faults < target and trio.current_time() < until and router.returncode is None:
        await trio.sleep(rng.uniform(0.3, 1.5))
        ours = await trio.to_thread.run_sync(_ours, label)
        if not ours:
            continue
        container = rng.choice(sorted(ours))
        kind = KINDS[row.faults] if row.faults < len(KINDS) else rng.choice(KINDS)
        if await _fault(kind, container, rng):
            row.faults += 1
            row.kinds[kind] = row.kinds.get(kind, 0) + 1
            outcomes[kind][await _afterwards(client, ours[container], container, kind)] += 1
    if row.faults < target:
        row.notes.append(f"the phase's bound ended its faults at {row.faults} of {target} (a loaded machine)")


def _in_order(row: FaultRow, store: Any, session: str, expected: dict[str, str]) -> None:
    """The transcript holds each delivery's user message then its answer,
    in the order they were sent (one at a time), and nothing else."""
    ids = [m["id"] for m in store.messages.all(session)]
    want = [f"{event_id}:{role}" for event_id in expected for role in ("user", "assistant")]
    if ids != want and len(ids) == len(set(ids)):  # a duplicate is counted by judge
        row.wrong += 1
        row.notes.append(f"{session}: the transcript is {ids[:6]}..., not the deliveries' order")


async def phase_docker(target: int, seed: int, work: Path) -> FaultRow | str:
    """The phase (module docstring); a ``skipped: ...`` line where no
    Docker engine answers or the image cannot be had."""
    from router.host.store import Store
    from tests.api.processes import serve, stop
    from tests.support.campaign import _api_client
    from tests.support.docker import DockerUnavailable, ensure_project_image, remove_labelled

    why = docker_missing()
    if why is not None:
        return why
    try:
        image = await trio.to_thread.run_sync(ensure_project_image)
    except DockerUnavailable as exc:
        return f"skipped: the project image cannot be had ({exc})"
    row = FaultRow(PHASE, exits=0, stopped=0)
    rng = rng_for(seed, row.phase)
    label = f"faults-{uuid.uuid4().hex[:12]}"
    (work / "settings").mkdir(parents=True, exist_ok=True)
    (work / "settings" / "plugins.json").write_text(json.dumps(_plugins(label)))
    outcomes: dict[str, Counter] = defaultdict(Counter)
    try:
        async with serve(work, "--launcher", "docker", "--image", image) as served:
            async with _api_client(served.page) as client:
                senders = _Senders(row, client, rng)
                for session in SESSIONS:
                    response = await client.post("/sessions", json={"id": session})
                    assert response.status_code in (200, 201), response.text
                async with trio.open_nursery() as nursery:
                    for session in SESSIONS:
                        nursery.start_soon(senders.run, session, 3)
                    await _faults(row, rng, client, label, target, outcomes, served.process)
                    senders.enough.set()
                if served.process.returncode is None:  # else the row says the router exited
                    await _resend(row, client, senders)
            if served.process.returncode is not None:
                row.exits = 1
                row.notes.append(f"router serve exited ({served.process.returncode})")
            await stop(served.process)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(remove_labelled, label)
    row.cases = [(f"docker {kind}", "; ".join(f"{n}× {what}" for what, n in sorted(outcomes[kind].items())))
                 for kind in KINDS if kind in outcomes]
    with Store(work / "data" / "host.sqlite", exclusive=False) as store:
        for session in SESSIONS:
            judge(row, store, session, senders.expected[session])
            _in_order(row, store, session, senders.expected[session])
    return row


async def _resend(row: FaultRow, client: Any, senders: _Senders) -> None:
    """Every delivery once more: answered from the record, the same answer."""
    for session, expected in senders.expected.items():
        for event_id, text in expected.items():
            response = await client.post(f"/sessions/{session}/messages",
                                         json={"text": text, "eventId": event_id, "wait": True})
            again = _json(response).get("reply") if response.status_code == 200 else None
            if event_id in senders.answers and again != senders.answers[event_id]:
                row.wrong += 1
                row.notes.append(f"{event_id}: answered {senders.answers[event_id]}, then from the record {again}")
