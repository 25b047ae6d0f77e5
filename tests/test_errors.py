"""The one refusal type and the one fan-out."""

from __future__ import annotations

import pickle

import pytest
import trio

from router._fanout import FanOut, FanOutStatistics, Lagged
from router.errors import Refusal, code_of, is_code, refusal_of


def test_a_refusal_has_a_code_a_message_and_data():
    refusal = Refusal("harness-off", "the harness is off; switch it on", harness="echo")
    assert str(refusal) == "harness-off: the harness is off; switch it on"
    assert refusal.to_json() == {"error": "harness-off", "message": "the harness is off; switch it on", "harness": "echo"}
    assert refusal == Refusal("harness-off", "the harness is off; switch it on", harness="echo")
    assert refusal != Refusal("harness-off", "another sentence", harness="echo")
    assert pickle.loads(pickle.dumps(refusal)) == refusal
    assert code_of(refusal) == "harness-off"


@pytest.mark.parametrize("code", ["", "Harness-off", "harness_off", "-off", "off-", "a--b", "1abc", None, 3])
def test_a_code_that_is_not_kebab_case_is_refused(code):
    assert not is_code(code)
    with pytest.raises(ValueError):
        Refusal(code, "x")  # type: ignore[arg-type]


def test_a_subclass_is_a_refusal_and_equal_only_to_its_own_kind():
    class Special(Refusal):
        pass

    assert isinstance(Special("a-b", "m"), Refusal)
    assert Special("a-b", "m") != Refusal("a-b", "m")


def _lagged() -> Lagged:
    return Lagged("events-lagged", "fell behind; subscribe again")


async def test_a_fanout_hands_every_batch_to_every_subscriber_in_order():
    fanout: FanOut[list[int]] = FanOut(buffer=8, lagged_error=_lagged)
    with fanout.subscribe() as one, fanout.subscribe() as two:
        fanout.publish([1])
        fanout.publish([2, 3])
        fanout.close()
        assert [batch async for batch in one] == [[1], [2, 3]]
        assert [batch async for batch in two] == [[1], [2, 3]]
    assert fanout.statistics() == FanOutStatistics(subscribers=0, published=2, dropped=0, closed=True)


async def test_a_subscriber_that_falls_behind_is_dropped_after_what_it_holds():
    fanout: FanOut[int] = FanOut(buffer=2, lagged_error=_lagged)
    with fanout.subscribe() as slow, fanout.subscribe() as fast:
        fanout.publish(1)
        fanout.publish(2)
        assert await fast.__anext__() == 1
        assert await fast.__anext__() == 2
        fanout.publish(3)  # slow is full: dropped; fast takes it
        assert slow.lagged and not fast.lagged
        assert len(fanout) == 1
        assert [await slow.__anext__(), await slow.__anext__()] == [1, 2]
        with pytest.raises(Lagged) as caught:
            await slow.__anext__()
        assert caught.value.code == "events-lagged"
        assert await fast.__anext__() == 3


async def test_reset_drops_everyone_and_a_closed_fanout_ends_new_subscriptions_at_once():
    fanout: FanOut[int] = FanOut(buffer=4, lagged_error=_lagged)
    with fanout.subscribe() as one:
        fanout.reset()
        with pytest.raises(Lagged):
            await one.__anext__()
    fanout.close()
    with fanout.subscribe() as late:
        with trio.fail_after(1):
            assert [batch async for batch in late] == []


@pytest.mark.parametrize(
    ("value", "only", "expected"),
    [
        ({"code": "no-room", "message": "the disk is full"}, False, Refusal("no-room", "the disk is full")),
        ({"code": "no-room", "message": "full", "retry": 3}, False, Refusal("no-room", "full")),
        ({"code": "no-room", "message": "full", "retry": 3}, True, None),  # only the two keys
        ({"code": "No Room", "message": "full"}, False, None),  # not a code
        ({"code": "no-room"}, False, None),
        ({"code": "no-room", "message": 3}, False, None),
        (["no-room", "full"], False, None),
        (None, False, None),
    ],
)
def test_a_plugins_refusal_answer_is_read_in_one_place(value: object, only: bool, expected: Refusal | None) -> None:
    assert refusal_of(value, only=only) == expected


def test_the_refusal_carrying_outcomes_are_made_with_their_refusal() -> None:
    """``DeliveryUnanswered``, ``DeliveryRefused`` and ``NoAnswer`` carry a
    :class:`Refusal` (``refusal=``): a call that still passes ``code=`` or
    ``message=`` would fail only when its path runs (a rare one, often)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    wrong = []
    for path in sorted([*(root / "router").rglob("*.py"), *(root / "tests").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("DeliveryUnanswered", "DeliveryRefused", "NoAnswer")
                    and any(keyword.arg in ("code", "message") for keyword in node.keywords)):
                wrong.append(f"{path.relative_to(root)}:{node.lineno}")
    assert wrong == []


#: Dict literals spelled like a refusal that are not one of ours, each with
#: what it is: another protocol's error object, or an event that carries a code.
NOT_OUR_REFUSALS: dict[str, str] = {
    "router/acp/jsonrpc.py": "JSON-RPC 2.0's error object ({code: int, message})",
    "router/mcp_wire.py": "JSON-RPC 2.0's error object ({code: int, message})",
    "router/turns/requests.py": "JSON-RPC 2.0's error object ({code: int, message})",
    "router/turns/live.py": "the live view's notices ({type: notice, level, code, message}): events, not refusals",
    "router/plugins/broker.py": "the plug-in log's lines (docs/plugins.md: {event, code, message})",
    "router/plugins/layer.py": "the plug-in log's lines (docs/plugins.md: {event, code, message})",
    "router/plugins/limit_checks.py": "the plug-in log's lines (docs/plugins.md: {event, code, message})",
    "router/plugins/loader.py": "the plug-in log's lines (docs/plugins.md: {event, code, message})",
    "router/plugins/usage.py": "the plug-in log's lines (docs/plugins.md: {event, code, message})",
}
#: Refusals still spelled by hand in files under another owner's work, each
#: with its owner; emptied as they become ``Refusal(...).to_json()``.
SPELLED_BY_HAND: dict[str, str] = {}


def test_no_refusal_is_spelled_by_hand() -> None:
    """A refusal at an edge of ours is ``Refusal.to_json()``: a dict literal
    with ``message`` beside ``error`` or ``code`` anywhere else in ``router/``
    (the plug-in modules, which speak the plug-in protocol, aside) is a
    second spelling waiting to drift."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    found = set()
    for path in sorted((root / "router").rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith("router/plugins/") and name.count("/") > 2 or name == "router/errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            keys = {key.value for key in getattr(node, "keys", ()) if isinstance(key, ast.Constant)}
            if isinstance(node, ast.Dict) and "message" in keys and keys & {"error", "code"}:
                found.add(name)
    assert sorted(found - set(NOT_OUR_REFUSALS) - set(SPELLED_BY_HAND)) == []
    assert sorted(set(SPELLED_BY_HAND) - found) == []  # an entry whose file is done is removed


def test_a_refusal_read_back_from_its_json_is_the_same_refusal() -> None:
    refused = Refusal("no-room", "the disk is full", path="/data")
    assert Refusal.from_json(refused.to_json()) == refused
    assert Refusal.from_json({"code": "no-room", "message": "full"}) is None  # the plug-in protocol's, not ours
    assert Refusal.from_json({"error": "No Room", "message": "full"}) is None
    assert Refusal.from_json({"error": "no-room", "message": 3}) is None
    assert Refusal.from_json("no-room: full") is None
