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
