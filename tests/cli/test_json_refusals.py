"""The HTTP commands' refusals with ``--json``: one line on stderr,
``router COMMAND: CODE: sentence``, and on stdout the refusal as
``Refusal.to_json`` spells it (docs/cli.md, "Refusals"), whether the router
said it, the command decided it or what answered is no router. A real TCP
server answers the commands, in-process."""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable

import pytest

from router.turns.cli import configure, configure_abort, configure_launch, run, run_abort, run_launch
from tests.support.canned_http import HOLD, canned

TOKEN = "t" * 24


def _args(configure_command: Callable[[argparse.ArgumentParser], None], url: str, *words: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure_command(parser)
    return parser.parse_args([*words, "--url", url, "--token", TOKEN, "--json"])


def _said(capsys: pytest.CaptureFixture[str]) -> tuple[Any, str]:
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_a_routers_refusal_is_printed_as_it_spelled_it(capsys: pytest.CaptureFixture[str]) -> None:
    stopped = {"error": "session-stopped", "message": "session 's1' is stopped; resume it", "eventId": "e1"}
    with canned({("POST", "/sessions/s1/messages"): (409, stopped)}) as url:
        status = run(_args(configure, url, "s1", "hi", "--event-id", "e1"))
    out, err = _said(capsys)
    assert status == 1 and out == stopped
    assert err == "router send: session-stopped: session 's1' is stopped; resume it (resend with --event-id e1)\n"


def test_no_answer_in_time_is_the_timeout_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    with canned({("POST", "/sessions/s1/messages"): HOLD}) as url:
        status = run(_args(configure, url, "s1", "hi", "--event-id", "e2", "--timeout", "0.3"))
    out, err = _said(capsys)
    assert status == 1
    assert out == {"error": "timeout", "message": "no answer within 0.3 s; the same id is written once",
                   "eventId": "e2"}
    assert err == "router send: timeout: no answer within 0.3 s; the same id is written once (resend with " \
        "--event-id e2)\n"


def test_nothing_open_to_abort_is_unknown_operation(capsys: pytest.CaptureFixture[str]) -> None:
    with canned({("POST", "/sessions/s1/abort"): (200, {"session": "s1", "aborted": False})}) as url:
        status = run_abort(_args(configure_abort, url, "s1", "op1"))
    out, err = _said(capsys)
    sentence = ("operation op1 is not open in s1 (it settled, or was never sent there); `router send --json` prints "
                "an operation's id")
    assert status == 1 and out == {"error": "unknown-operation", "message": sentence}
    assert err == f"router abort: unknown-operation: {sentence}\n"


@pytest.mark.parametrize("answer", [[1, 2], {"status": "nope"}])
def test_an_answer_that_is_no_refusal_is_not_a_router(capsys: pytest.CaptureFixture[str], answer: Any) -> None:
    with canned({("POST", "/sessions"): (500, answer)}) as url:
        status = run_launch(_args(configure_launch, url, "s1"))
    out, err = _said(capsys)
    assert status == 1 and out == {"error": "not-a-router", "message": str(answer)}
    assert err == f"router launch: not-a-router: {answer}\n"
