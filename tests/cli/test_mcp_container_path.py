"""A Claude Code session's ``router mcp`` drives no container session, so it
does not load the container path until one is driven: the in-process echo
daemon (``router.daemon``, built on its first connection:
``router.serve.InProcessDaemon``), the host's session links (the WebSocket
on wsproto, the container wire, the reconcile core) and OpenSSL's ``ssl``
(``router._deferred``), nor the worktrees, which only ``router serve`` runs
(docs/bench.md, "``router mcp``'s memory"). When a container session is
driven, they load then and it is answered as before.

Each ``router mcp`` runs in a fresh interpreter and writes ``sys.modules``
at its exit. A behaviour, not a memory figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.test_mcp_server import Probed, initialize, request

#: What a router mcp that drives no container session must not load.
CONTAINER_PATH = ("router.daemon", "router.daemon.core", "router.daemon.transport", "wsproto", "router._websocket",
                  "wire.container", "router.host.session_link", "router.host.reconcile", "router.host.connection")
#: Loaded only when TLS is spoken (``ssl`` itself is in ``sys.modules`` as
#: its stand-in, ``router._deferred``).
TLS = ("_ssl",)
SERVE_ONLY = ("router.worktrees.core", "router.worktrees.git")


def _modules(probed: Probed) -> set[str]:
    probed.loaded()  # stdin closed, exit 0
    return set(json.loads(probed.modules.read_text()))


def _text(answer: dict[str, Any]) -> Any:
    result = answer["result"]
    assert result["isError"] is False, result
    return json.loads(result["content"][0]["text"])


def test_a_router_mcp_that_drives_no_container_session_loads_none_of_it(tmp_path: Path) -> None:
    probed = Probed(tmp_path, "idle")
    try:
        assert "result" in probed.ask(initialize())
        assert "result" in probed.ask(request(2, "tools/list"))
        assert _text(probed.ask(request(3, "tools/call", {"name": "list_sessions"}))) == {"sessions": []}
    finally:
        loaded = _modules(probed)
    assert "router.host.host" in loaded and "router.turns.router" in loaded  # the router did run
    assert [name for name in (*CONTAINER_PATH, *TLS, *SERVE_ONLY) if name in loaded] == []


def test_the_first_container_turn_loads_the_daemon_and_is_answered(tmp_path: Path) -> None:
    """Its hidden echo ``root`` is still reached by name: the in-process
    daemon is built on the host's first connection, and answers."""
    probed = Probed(tmp_path, "driven")
    try:
        assert "result" in probed.ask(initialize())
        for turn, text in enumerate(("first", "second"), start=2):
            answer = _text(probed.ask(request(turn, "tools/call", {
                "name": "send_message", "arguments": {"session": "root", "text": text, "wait": True}})))
            assert f"echo: {text}" in json.dumps(answer), answer
    finally:
        loaded = _modules(probed)
    assert [name for name in CONTAINER_PATH if name not in loaded] == []
    assert [name for name in TLS if name in loaded] == []  # ws:// to loopback: no TLS
