"""The kind registry is the contract modules are written against."""

from __future__ import annotations

from router.plugins.kinds import KINDS, check_kind_setting


def test_the_registry() -> None:
    table = {
        name: (kind.interface, kind.switch,
               [("async " if f.is_async else "") + f.name for f in kind.functions])
        for name, kind in KINDS.items()
    }
    assert table == {
        "usage-source": (1, "list", ["async read_turn"]),
        "limit-check": (2, "list", ["may_launch", "must_stop", "report"]),
        "search-source": (1, "one", ["async search"]),
        "channel": (1, "list", ["async dispatch"]),
        "harness": (1, "list", ["levels", "counts_account", "reach", "env",
                                "async preflight", "async version"]),
        "launcher": (1, "one", ["async start", "async wait", "async inspect", "async stop",
                                "async remove_workspace"]),
        "notifier": (1, "list", ["destinations", "check", "async send"]),
    }
    assert all(kind.exports[0] == "INTERFACE_VERSION" for kind in KINDS.values())


def test_kind_settings() -> None:
    harness, search = KINDS["harness"], KINDS["search-source"]
    assert check_kind_setting(harness, []) is None
    assert check_kind_setting(harness, ["echo", "claude-code"]) is None
    assert check_kind_setting(search, "searxng-url") is None
    assert check_kind_setting(harness, ["echo", "echo"]).code == "invalid-plugins"
    assert check_kind_setting(harness, ["echo", 3]).code == "invalid-plugins"
    assert check_kind_setting(harness, {"echo": True}).code == "invalid-plugins"
    assert check_kind_setting(search, ["searxng-url"]).code == "invalid-plugins"
    assert check_kind_setting(search, None).code == "invalid-plugins"
    for bad in ("Echo", "-echo", "echo_1", "", "1echo", "echo/../x", "echo ", "echo\n"):
        assert check_kind_setting(harness, [bad]).code == "bad-name", bad
