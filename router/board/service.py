"""One router's view of the board: its own sessions and every other local
router's, and the way to the router that holds a session.

:class:`LocalBoard` is what ``GET /sessions``, ``GET /board/live``, the
MCP ``list_sessions`` tool and the forwarding of a send, an abort, a
resume, a read or a live view stand on:

- **Listing.** This router's sessions (``TurnRouter.list``), each described
  (:func:`describe`: ``harness``, ``model``, ``cwd`` where known,
  ``lastActivity``) and named with this router (``router``: its
  ``GET /router`` answer), then every other router's, surveyed over their
  private sockets (:func:`router.board.client.survey`, this router's own
  socket left out), each asked for its own sessions only (``GET
  /sessions?scope=router``), so no survey ever recurses. The others are
  asked while this router lists its own, and the records a listing reads
  besides the router's list (launches, a cluster's holders) are read beside
  it. The routers of its cluster are asked only for what they alone hold,
  and their answers are kept until they announce a change of their own
  sessions, for a second at most (:mod:`router.board.peers`). The record is read once per listing: the router's list hands each
  container session's ``updated_at`` and model from its own read
  (:class:`router.board.state.StampedListing`).
- **Kept rows.** Each session's row (and its JSON text) is made once and
  kept until what it is made of changes (:mod:`router.board.kept`): every
  input is read afresh each listing, only the describing and the encoding
  are saved; :meth:`LocalBoard.statistics` counts them.
- **Hidden sessions.** ``router mcp`` hides its in-process echo ``root``
  from the board (``hidden``): every router has one, and a Claude Code
  session's embedded router is on the board for its Claude Code session.
  Its own MCP client still reaches it (see :meth:`LocalBoard.holder`).
- **Where a session is served** (:meth:`LocalBoard.holder`): here when this
  router has it open or lists it; else at the one other router that lists it; else here
  (a hidden session, or none at all: this router's own refusal answers).
  Several other routers listing it is ``ambiguous-session``: name one (the
  API's ``?router=NAME``, the tools' ``router``). A forwarded request
  carries :data:`FORWARDED_HEADER`, and is served where it arrives, never
  forwarded again.
- **Forwarding** (:meth:`LocalBoard.forward`, :meth:`LocalBoard.forward_stream`
  for a live view): the request's path, body and channel header (and
  ``Last-Event-ID``) sent over the holder's socket, and its answer handed
  back as it is, a live view as it streams. Exactly once by event id still holds: the body keeps its
  ``eventId``, and the holder's record answers a resend.

Error handling: a survey that cannot be made (``unsafe-directory``) leaves
the others out and says so in ``skipped``; a holder that cannot be reached
is ``holder-unreachable``.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any, AsyncIterator, Awaitable, Callable, Final, Mapping

import attrs
import trio

from router._httpx import unix_transport
from router.board.feed import BoardFeed
from router.board.kept import Kept, listing_text
from router.board.peers import PeerAnswers
from router.board.client import ANSWER_TIMEOUT, BASE_URL, Board, Reached, Skipped, holder, survey
from router.errors import Refusal
from wire.json import Encoded

__all__ = ["LocalBoardStatistics", "Activity", "BOARD_INTERVAL", "FORWARDED_HEADER", "Facts", "Listing", "LocalBoard", "describe", "process_cwd"]

#: The header a forwarded request carries (ours): serve it here.
FORWARDED_HEADER: Final = "x-router-forwarded"
#: Seconds between two surveys of the board's live stream (ours: a session
#: created anywhere shows within a second or two; a survey is one small
#: request per router).
BOARD_INTERVAL: Final = 1.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Activity:
    """When each Claude Code session's listing last changed, as this router
    saw it (sans-IO). The mod link keeps no clock; its session's listing
    (state, busy, connected) is what changes when it does something."""

    def __init__(self, clock: Callable[[], int] = _now_ms) -> None:
        self._clock = clock
        self._seen: dict[str, tuple[Any, int]] = {}

    def stamp(self, session: str, facts: Any) -> int:
        """The time ``session``'s ``facts`` last changed (now, the first
        time they are seen)."""
        seen = self._seen.get(session)
        if seen is None or seen[0] != facts:
            seen = (facts, self._clock())
            self._seen[session] = seen
        return seen[1]


@attrs.frozen(kw_only=True)
class Facts:
    """What :func:`describe` knows of a router's sessions besides its
    listing, handed in by the main job that owns them (so the board reads
    no router internals)."""

    #: The host's store (``router.host.Store``); None: no container sessions.
    store: Any = None
    #: The deliveries' record (``router.turns.DeliveryLog``): launch records.
    deliveries: Any = None
    #: The harness the router's container sessions run on when no launch says.
    harness: str = "echo"
    #: Where a Claude Code session runs: the embedded router's working directory.
    cwd: str | None = None
    #: The cluster this router is one of (``router.cluster.ClusterNode``;
    #: None: it is alone): a container session is named with the router
    #: that holds its lease, and listed once however many routers of the
    #: cluster this machine has.
    cluster: Any = None
    #: The places ``router new`` made (``router.worktrees.Places.live``):
    #: session id -> its place, whose project, branch, base and worktree
    #: the listing shows.
    places: Any = None


async def read_facts(entries: list[dict[str, Any]], facts: Facts,
                     stamps: Mapping[str, Any] | None = None) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """What :func:`describe` reads for ``entries``: each container
    session's ``(updated_at, model)`` (its record's: ``stamps``, the ones
    the listing's own read gave, when they cover every container session
    listed, else read from the store) and launches (id -> launch), both
    empty when none is a container session."""
    launches: dict[str, Any] = {}
    containers = [entry.get("id") for entry in entries if entry.get("kind") == "container"]
    if containers:
        if facts.store is not None and (stamps is None or any(each not in stamps for each in containers)):
            stamps = {record.id: (record.updated_at, record.settings.get("model"))
                      for record in await facts.store.call(facts.store.sessions.all)}
        if facts.deliveries is not None:
            launches = await facts.deliveries.call(facts.deliveries.launches)
    return stamps or {}, launches


async def describe(entries: list[dict[str, Any]], facts: Facts, activity: Activity, *,
                   kept: Kept | None = None, launches: dict[str, Any] | None = None,
                   stamps: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """``entries`` (``TurnRouter.list``) with what is known besides:
    ``harness`` (a container session's: the one its launch routed to, else
    the router's; ``claude-code``), ``model`` (the session's settings',
    else its launch's; a Claude Code session's as its mod said), ``cwd`` (a
    Claude Code session's: the embedded router's working directory, where
    Claude Code starts it) and ``lastActivity`` (ms since the epoch: a
    container session's record's last change, a Claude Code session's last
    change seen here). With ``kept``, a session described before from the
    same entry, record stamp, launch and place is not described again
    (:mod:`router.board.kept`); ``launches``: read already (id -> launch);
    ``stamps``: each container session's ``(updated_at, model)`` from the
    listing's own read (``StampedListing``; None: read here)."""
    stamps, read = await read_facts(entries, facts if launches is None else attrs.evolve(facts, deliveries=None),
                                    stamps)
    launches = read if launches is None else launches
    places: dict[str, Any] = {}
    if facts.places is not None:
        places = {key: place.board_fields() for key, place in (await trio.to_thread.run_sync(facts.places)).items()}
    out = []
    for entry in entries:
        session = entry.get("id")
        place = places.get(session)  # type: ignore[arg-type]
        if entry.get("kind") == "container":
            stamp, launch = stamps.get(session), launches.get(session)  # type: ignore[arg-type]
            key: Any = (entry, stamp, None if launch is None else (launch.harness, launch.model), facts.harness, place)
            make = partial(_container, entry, stamp, launch, facts, place)
        else:
            active = activity.stamp(session, tuple(sorted(map(repr, entry.items()))))
            key = (entry, facts.cwd, active, place)
            make = partial(_claude_code, entry, facts, active, place)
        out.append(make() if kept is None or type(session) is not str else kept.row(session, key, make))
    return out


def _claude_code(entry: dict[str, Any], facts: Facts, stamp: int, place: dict[str, Any] | None) -> dict[str, Any]:
    item = {**entry, "harness": "claude-code"}  # its ``model`` is in the entry, as its mod said
    if facts.cwd is not None:
        item["cwd"] = facts.cwd
    item["lastActivity"] = stamp
    return item if place is None else {**item, **place}


def _container(entry: dict[str, Any], stamp: tuple[int, Any] | None, launch: Any, facts: Facts,
               place: dict[str, Any] | None = None) -> dict[str, Any]:
    item = {**entry, "harness": launch.harness if launch is not None else facts.harness}
    model = stamp[1] if stamp is not None else None
    model = model or (launch.model if launch is not None else None)
    if type(model) is str and model:
        item["model"] = model
    if stamp is not None:
        item["lastActivity"] = stamp[0]
    return item if place is None else {**item, **place}


@attrs.define
class Listing:
    """The board as one router sees it: every session, and the routers left
    out (each a :class:`~router.board.client.Skipped`)."""

    sessions: list[dict[str, Any]]
    skipped: list[Skipped]
    #: Each row's JSON text (:meth:`router.board.kept.Kept.text`); None:
    #: encoded as a whole.
    texts: Callable[[dict[str, Any]], str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The listing's JSON object (an :class:`~wire.json.Encoded` whose
        text is made of the kept rows' with ``texts``)."""
        out: dict[str, Any] = {"sessions": self.sessions}
        if self.skipped:
            out["skipped"] = [{"router": each.name, "socket": each.socket, **each.refusal.to_json()}
                              for each in self.skipped]
        if self.texts is None:
            return out
        rest = {key: value for key, value in out.items() if key != "sessions"}
        return Encoded(out, partial(listing_text, self.sessions, rest, self.texts))


@attrs.frozen
class LocalBoardStatistics:
    """The kept rows' figures (:mod:`router.board.kept`): sessions ``described``
    (made anew), final rows made (``rows_made``, with their router) and
    taken as they were (``rows_kept``), and rows whose JSON was made
    (``encoded``)."""

    described: int
    rows_made: int
    rows_kept: int
    encoded: int


class LocalBoard:
    """This router's view of the board (see the module docstring).
    ``info`` (this router's ``GET /router`` answer) and ``socket`` are set
    once its private socket is bound; until then its sessions carry no
    ``router``."""

    def __init__(self, router: Any, *, env: Mapping[str, str], facts: Facts | None = None,
                 hidden: frozenset[str] = frozenset(), timeout: float = ANSWER_TIMEOUT) -> None:
        self.router = router
        self.env = env
        self.facts = facts or Facts()
        self.hidden = hidden
        self.timeout = timeout
        self.info: dict[str, Any] | None = None
        self.socket: str | None = None
        self.activity = Activity()
        #: The board's live changes, surveyed once for every viewer.
        self.feed = BoardFeed(self, interval=BOARD_INTERVAL)
        #: The kept rows (:mod:`router.board.kept`), described and final,
        #: of the listing with the cluster's sessions (True) and without.
        self._kept: dict[bool, tuple[Kept, Kept]] = {True: (Kept(), Kept()), False: (Kept(), Kept())}
        #: The cluster's other routers' last answers (router.board.peers).
        self.peers = PeerAnswers()
        if self.facts.cluster is not None:
            self.facts.cluster.on_router_changed(self._peer_changed)

    def _peer_changed(self, router: str) -> None:
        self.peers.changed(router)
        if router != self.facts.cluster.id:
            self.feed.poke()  # another router's own sessions changed: the live board surveys

    def changed_here(self) -> None:
        """Something of this router's sessions may have changed (the turn
        router's ``on_change``): the live board surveys at once, and the
        cluster's other routers are told (they ask this router again)."""
        self.feed.poke()
        if self.facts.cluster is not None:
            self.facts.cluster.announce()

    def __repr__(self) -> str:
        return f"<LocalBoard {self.info['name'] if self.info else 'unnamed'} hidden={sorted(self.hidden)}>"

    @property
    def name(self) -> str | None:
        return None if self.info is None else str(self.info.get("name"))

    def statistics(self) -> LocalBoardStatistics:
        described = [kept.statistics() for kept, _ in self._kept.values()]
        rows = [kept.statistics() for _, kept in self._kept.values()]
        return LocalBoardStatistics(described=sum(each.made for each in described),
                                    rows_made=sum(each.made for each in rows), rows_kept=sum(each.kept for each in rows),
                                    encoded=sum(each.encoded for each in rows))
    async def own(self, *, shared: bool = True) -> list[dict[str, Any]]:
        """This router's listed sessions, described, each with ``router``;
        ``shared=False``: without its cluster's (``GET
        /sessions?scope=unshared``, asked by a router of the same cluster).
        A session whose row's inputs did not change since the last listing
        keeps its row (:mod:`router.board.kept`)."""
        containers = shared or self.facts.cluster is None
        described_kept, rows = self._kept[containers]
        facts = self.facts
        reads: dict[str, Callable[[], Awaitable[Any]]] = {
            "listed": self.router.list if containers else partial(self.router.list, containers=False)}
        if containers and facts.store is not None and facts.deliveries is not None:
            reads["launches"] = partial(facts.deliveries.call, facts.deliveries.launches)
        if containers and facts.cluster is not None:
            reads["holders"] = facts.cluster.holders
        read = dict(zip(reads, await _gather(*reads.values())))  # the other records beside the listing's, not after
        listed = read["listed"]
        entries = [entry for entry in listed if entry.get("id") not in self.hidden]
        described = await describe(entries, facts, self.activity, kept=described_kept, launches=read.get("launches"),
                                   stamps=getattr(listed, "stamps", None))  # the listing's own read of the record
        ids = [item.get("id") for item in described]
        described_kept.only(ids)
        rows.only(ids)
        if facts.cluster is not None:
            return await self._held(described, rows, read.get("holders"))
        if self.info is None:
            return described
        info = self.info
        return [rows.row(item["id"], (item, info), partial(_with, item, "router", info))
                if type(item.get("id")) is str else _with(item, "router", info) for item in described]

    async def _held(self, described: list[dict[str, Any]], rows: Kept,
                    holders: dict[str, dict[str, Any]] | None) -> list[dict[str, Any]]:
        """Each container session with the router of the cluster holding
        it (``null`` while none does: between a death and a takeover);
        ``holders``: read already (None: read here, if any is a container
        session)."""
        if not any(item.get("kind") == "container" for item in described):
            info = self.info
            return [item if info is None else _with(item, "router", info) for item in described]
        if holders is None:
            holders = await self.facts.cluster.holders()
        infos: dict[Any, Any] = {}  # each router's info parsed once, not once per session it holds
        out = []
        for item in described:
            if item.get("kind") != "container":
                out.append({**item, "router": self.info} if self.info is not None else item)
                continue
            held = holders.get(item["id"])
            key = None if held is None else (held["id"], held["apiUrl"], held["info"])
            if key not in infos:
                infos[key] = _holder_info(held)
            out.append(rows.row(item["id"], (item, key), partial(_clustered, item, infos[key])))
        return out

    def changed(self) -> Any:
        """The event the next change of the board sets, when something
        tells (a cluster's notification), else None (the feed's interval
        and its pokes only)."""
        return None if self.facts.cluster is None else self.facts.cluster.board_changed()

    async def others(self, *, unshared: frozenset[str] = frozenset(), known: Mapping[str, Reached] | None = None) -> Board:
        """Every other router's sessions; a directory that is not private
        is one skipped entry, not an error. The routers at the sockets
        ``unshared`` are asked for their sessions outside the cluster,
        those at the sockets ``known`` not at all (their answer given)."""
        try:
            return await survey(self.env, timeout=self.timeout, exclude=self.socket, unshared=unshared, known=known)
        except Refusal as refused:
            directory = str(refused.data.get("path", ""))
            return Board(directory=directory, skipped=[Skipped(directory, refused)])

    async def listing(self) -> Listing:
        """The whole board: this router's sessions, then the others'. The
        routers of this router's cluster are asked only for what they
        alone hold (their Claude Code sessions): this router lists the
        cluster's sessions from the shared record already."""
        board, own = await _gather(self._survey_others, self.own)  # the other routers asked while this one lists its own
        others = board.sessions()
        if self.facts.cluster is not None:  # the cluster's sessions: listed once, by this router
            mine = _cluster_holders(own)
            others = [item for item in others if not _same_cluster_session(item, mine)]
        return Listing(sessions=own + others, skipped=board.skipped, texts=self._kept[True][1].text)

    async def _survey_others(self) -> Board:
        """The other routers' sessions; of the cluster's routers their own
        (unshared) only, answered from what each last said while it can
        be trusted (:mod:`router.board.peers`)."""
        cluster = self.facts.cluster
        if cluster is None:
            return await self.others()
        peers = await cluster.routers()
        epoch, live = cluster.listening()
        now = trio.current_time()
        marks = self.peers.marks(peers)
        board = await self.others(unshared=frozenset(peers),
                                  known=self.peers.known(peers, epoch=epoch, live=live, now=now))
        self.peers.answered(peers, marks, board.reached, epoch=epoch, live=live, now=now)
        return board

    async def holder(self, session: str, *, named: str | None = None) -> Reached | None:
        """The router to forward ``session``'s request to, or None to serve
        it here (see the module docstring). Raises a
        :class:`~router.errors.Refusal`: ``ambiguous-session``, and for a
        named router ``unknown-router`` and what a survey skips it for."""
        if named is not None:
            if named == self.name:
                return None
            found, _ = await holder(self.env, session, router=named, timeout=self.timeout)
            return found
        if session not in self.hidden and self.router.is_open(session):
            # Open here, so this router lists it: no need to list every
            # session (a store read and two more worker-thread hops per send).
            return None
        listed = {entry.get("id") for entry in await self.router.list() if entry.get("id") not in self.hidden}
        if session in listed:
            return None
        found_here = (await self.others()).holders(session)
        if len(found_here) > 1:
            names = ", ".join(each.name for each in found_here)
            raise Refusal("ambiguous-session", f"{len(found_here)} routers hold a session {session!r} ({names}); "
                          "name the one you mean (?router=NAME)", session=session,
                          routers=[each.name for each in found_here])
        return found_here[0] if found_here else None

    async def forward(self, reached: Reached, method: str, path: str, body: bytes,
                      headers: Mapping[str, str]) -> tuple[int, bytes]:
        """``method path`` with ``body`` at the router ``reached``, over its
        socket: its status and body. Raises a
        :class:`~router.errors.Refusal` (``holder-unreachable``) when it
        cannot be reached or hangs up."""
        import httpx

        try:
            async with httpx.AsyncClient(transport=unix_transport(reached.socket), base_url=BASE_URL,
                                         timeout=httpx.Timeout(None, connect=self.timeout)) as client:
                response = await client.request(method, path, content=body,
                                                headers={**headers, FORWARDED_HEADER: "1"})
                return response.status_code, response.content
        except httpx.HTTPError as exc:
            raise Refusal("holder-unreachable", f"router {reached.name}, which holds the session, could not be "
                          f"reached ({exc or type(exc).__name__}); if you sent a message, resend it with the same "
                          "eventId", router=reached.name) from None

    async def forward_stream(self, reached: Reached, path: str,
                             headers: Mapping[str, str]) -> tuple[int, str, AsyncIterator[bytes]]:
        """``GET path`` at the router ``reached``, streamed (a live view):
        its status, its content type, and its body as it comes. The body
        ends when the holder ends it or goes away; closing it (the client
        hung up) closes the connection to the holder. Raises
        ``holder-unreachable`` as :meth:`forward` does."""
        import httpx

        client = httpx.AsyncClient(transport=unix_transport(reached.socket), base_url=BASE_URL,
                                   timeout=httpx.Timeout(None, connect=self.timeout))
        try:
            response = await client.send(client.build_request("GET", path, headers={**headers, FORWARDED_HEADER: "1"}),
                                         stream=True)
        except BaseException as exc:
            await client.aclose()
            if isinstance(exc, httpx.HTTPError):
                raise Refusal("holder-unreachable", f"router {reached.name}, which holds the session, could not be "
                              f"reached ({exc or type(exc).__name__})", router=reached.name) from None
            raise

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
            except httpx.HTTPError:
                return  # the holder went away: the stream ends, as it would at the holder's stop
            finally:
                await response.aclose()
                await client.aclose()

        return response.status_code, response.headers.get("content-type", "application/json"), body()


async def _gather(*reads: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Each of ``reads`` awaited at once, their answers in order; the first
    to fail cancels the others and its error is raised as it is (a
    ``Refusal`` stays one, not an exception group)."""
    answers: list[Any] = [None] * len(reads)
    errors: list[Exception] = []

    async def one(index: int, read: Callable[[], Awaitable[Any]]) -> None:
        try:
            answers[index] = await read()
        except Exception as error:
            errors.append(error)
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for index, read in enumerate(reads):
            nursery.start_soon(one, index, read)
    if errors:
        raise errors[0]
    return answers


def _with(item: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return {**item, key: value}


def _holder_info(held: dict[str, Any] | None) -> Any:
    """The ``router`` of a session the cluster's router ``held`` holds
    (its ``info`` with ``cluster`` and ``url``); None while none does."""
    from wire.json import JsonError, loads

    if held is None:
        return None
    try:
        info = loads(held["info"] or "{}")
    except JsonError:
        info = {}
    return {**info, "cluster": held["id"], "url": held["apiUrl"]} if isinstance(info, dict) else None


def _clustered(item: dict[str, Any], info: Any) -> dict[str, Any]:
    return {**item, "router": info, "clustered": True}


def process_cwd() -> str | None:
    """This process's working directory, or None when it is gone."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _cluster_holders(own: list[dict[str, Any]]) -> dict[Any, Any]:
    """This router's clustered sessions: id -> the cluster router holding it
    (the first listing of an id, as a scan of ``own`` would find it)."""
    holders: dict[Any, Any] = {}
    for mine in own:
        if mine.get("clustered"):
            holders.setdefault(mine.get("id"), (mine.get("router") or {}).get("cluster"))
    return holders


def _same_cluster_session(item: Mapping[str, Any], mine: dict[Any, Any]) -> bool:
    """Whether another router's ``item`` is one of this router's cluster's
    sessions (which this router lists already; ``mine`` from
    :func:`_cluster_holders`): clustered, of the same id, and held by the
    same router of the cluster. A session of the same id on a router with a
    record of its own (SQLite), or in another cluster, is another session
    and stays on the board. One lookup per item: the board of 1,000
    sessions over three routers spent 13 % of its answer in a scan per item."""
    if not item.get("clustered") or item.get("id") not in mine:
        return False
    return mine[item.get("id")] == (item.get("router") or {}).get("cluster")
