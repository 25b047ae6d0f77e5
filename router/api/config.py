"""The API's settings (:class:`ApiConfig`), in a module of their own
without Quart: a router that serves its private socket builds them at
start, and loads Quart-Trio and Hypercorn only when the first connection
comes (:class:`router.api.server.LocalServer`)."""

from __future__ import annotations

import attrs

__all__ = ["ApiConfig"]


@attrs.frozen(kw_only=True)
class ApiConfig:
    #: The harness a new session's launch must route to: the one that runs
    #: on this router's host (``echo`` for the in-process daemon).
    harness: str = "echo"
    #: Other harnesses a launch may route to here: with ``--daemon``, the
    #: ``container`` module (a daemon named by URL) beside the daemon's own.
    also: frozenset[str] = frozenset()
    #: The launcher in force (None: none; one daemon): with one, a launch
    #: may route to any harness a daemon runs (not the mod link's).
    launcher: str | None = None
    #: The instance ``POST /sessions`` launches when the body names none.
    default_instance: str = "default"
    #: Seconds of quiet before the live stream's keep-alive comment.
    live_keepalive: float = 15.0
    #: Live streams one credential may hold at once (:mod:`router.api.streams`;
    #: ours: a page holds two, so this is a person's many tabs and tools).
    max_streams: int = 32
