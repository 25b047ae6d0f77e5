"""No class name is defined twice in ``router/`` and ``wire/`` for two
different things: a reader who meets ``Stop`` or ``LinkCore`` in a traceback,
a log line or a review should know which one without opening the import.

Each class is named for what it is (``StopContainer``, the lifecycle's effect;
``MustStop``, a limit check's verdict; ``ExitWith``, a command's exit). The
names below are still defined twice, in files another engineer is rewriting
this session; each entry says whose, and goes when they are renamed.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Genuine protocol-shape twins: the same thing on two sides of a wire, kept
#: under one name on purpose. None today.
TWINS: dict[str, str] = {}

#: Defined twice in files under another owner's rewrite: name -> the owner
#: and what is left to do. Emptied as their branches merge.
PENDING: dict[str, str] = {
    # store: router/_db.py's and router/cluster/pg.py's database classes, one
    # storage layer to come in router/store/.
    "Database": "store",
    # store: router/_db.py's store target (a path or a PostgreSQL URL), beside
    # router/turns/targets/base.py's session target.
    "Target": "store",
    # store: router/host/store.py's UsageAfter is the same shape as the
    # ledger's router.plugins.usage.UsageAfter: one class, the store
    # answering the ledger's.
    "UsageAfter": "store",
    # net: router/modlink/http.py's HTTP response, beside wire/container.py's
    # `answer` message (a wire name, kept).
    "Answer": "net",
    # net: router/_http11.py's server limits, beside router/plugins/limit_checks.py's
    # `Limits` (our limit checks); one to be named for what it is
    # (e.g. HttpLimits).
    "Limits": "net",
    # notify: router/notify/core.py's Web Push subscription, beside
    # router/modlink/server.py's subscriber view (net's); one of them is to
    # be named for what it is (e.g. PushSubscription).
    "Subscription": "notify",
}


def defined_classes() -> dict[str, list[str]]:
    """Every class name in ``router/`` and ``wire/`` -> where it is defined."""
    where: dict[str, list[str]] = defaultdict(list)
    for top in ("router", "wire"):
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    return where


def test_no_class_name_is_defined_twice() -> None:
    twice = {
        name: places
        for name, places in defined_classes().items()
        if len(places) > 1 and name not in TWINS and name not in PENDING
    }
    assert twice == {}


def test_every_listed_name_is_still_defined_twice() -> None:
    """An entry whose name is now defined once is removed from the lists."""
    where = defined_classes()
    stale = [name for name in (*TWINS, *PENDING) if len(where.get(name, [])) < 2]
    assert stale == []
