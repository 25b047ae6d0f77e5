"""``router send SESSION [TEXT]``, ``router abort SESSION [OPERATION]``,
``router resume SESSION``, ``router cancel-park SESSION`` and ``router launch
SESSION``: a session's messages and turns from the command line, whichever
local router holds it.

**router launch** creates a container session at the one ``router serve``
of this user (``--router NAME`` or ``--url`` to choose), through its
launcher in force (``router serve --launcher``): ``--harness`` says what the
session's daemon runs. The daemon starts with the session's first message.

**Where.** With no ``--url`` each finds the router that holds SESSION among
this user's routers (:func:`router.board.client.holder`: every router's
private Unix socket is asked) and posts over that socket, which takes no
token; ``--router NAME`` names the router instead (needed when several hold
a session of that id). ``--url`` posts to a router's TCP API instead, with
its access token: ``$ROUTER_TOKEN`` or ``--token-file FILE`` (a 0600
file; ``--token`` too, though a command line is readable by every local
user), else the ``api-token`` file of the settings directory
(``--settings``, else the default; :mod:`router.board.access`).

**router send.** TEXT ``-``, or no TEXT, reads the message from stdin (one
trailing newline stripped: what ``echo`` and a terminal's last Enter add).
The post goes through the ``cli`` channel under an event id the command
mints (or ``--event-id``), so a send that went unanswered can be sent again
with the same id and is written once. By default it waits for the session's reply: a
container session's operation settling, or the end of the turn a Claude
Code session's message starts or joins (the last assistant message then;
the command watches the session's listing and transcript); ``--no-wait``
answers once the message is in the session (``started as a prompt``,
``written as a row`` ...).
``--card`` (a message that is not the person's own words) means something
only to a Claude Code session, and is refused for a container session.

Output: the answer's text on stdout (a container session's reply; what
became of the message otherwise: ``written as a row``, ``started as a
prompt`` ...); with ``--json`` the answer as one JSON line instead (a
refusal too, as ``{error, message, eventId?}``). Refusals and unanswered
sends always go to stderr as ``router send: CODE: sentence``. While it waits
on a terminal, stderr shows how long it has waited.

Exit status (``router send``):

- 0: delivered (and, when waited for, the reply is ``done``); or kept
  (``kept: ...``): the session is parked at the provider's usage limit and
  the message goes in once at the reset (docs/limits.md);
- 1: refused (``unknown-session``, ``ambiguous-session``, the router's own
  refusals), unanswered (resend with the printed event id), dropped, a
  reply ``unanswered``, no answer within ``--timeout``;
- 2: a usage or connection error (``no-router``, ``unknown-router``,
  ``unsafe-directory``, ``cannot-connect``, ``no-token-file``,
  ``token-file-unsafe``, ``bad-token``, ``card-meaningless`` ...);
- 3: the ``cli`` channel is switched off (``CLI_OFF_EXIT`` of the Mosaic plug-in layer's README; the
  message names the recovery command).

``router abort``, ``router resume`` (a stopped session; a parked one
resumes now) and ``router cancel-park`` exit 0 when done (``resumed:
false``, ``cancelled: false`` included), 1 when refused (``router abort
SESSION OPERATION`` of an operation not open there: ``unknown-operation``),
2 as ``send`` does. docs/cli.md tables every refusal.

Every request is a blocking one (:mod:`router._client_sync`): these
commands load neither trio nor httpx, whose import was most of their time
(docs/bench.md, "The command line and ``router mcp``"); a progress line is
a thread's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from typing import TYPE_CHECKING, Any, Callable, NamedTuple
from urllib.parse import quote

if TYPE_CHECKING:
    import threading

    from router.errors import Refusal

__all__ = ["configure", "configure_abort", "configure_cancel_park", "configure_launch", "configure_resume",
           "exit_status", "message_text", "run", "run_abort", "run_cancel_park", "run_launch", "run_resume", "summary"]

DEFAULT_URL = "http://127.0.0.1:8765"
#: ``router.plugins.channels.CLI_OFF_EXIT``, not imported: this command
#: loads nothing of the server side.
CLI_OFF_EXIT = 3
#: Exit statuses (see the module docstring).
DONE, REFUSED, USAGE = 0, 1, 2
#: Refusals that are the caller's to mend, not the router's "no": exit 2.
USAGE_CODES = frozenset({"no-token", "bad-token", "bad-host", "no-token-file", "token-file-unsafe", "token-file-bad",
                         "token-twice"})
#: Seconds between two progress updates on a terminal (ours).
PROGRESS_INTERVAL = 1.0


def _add_reach(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help=f"a router's TCP API ({DEFAULT_URL} for `router serve`'s default port); "
                        "default: the router that holds SESSION, over its private socket")
    parser.add_argument("--router", metavar="NAME", help="the router to use, by the name `router sessions` shows")
    parser.add_argument("--token-file", metavar="FILE", help="a 0600 file holding the TCP API's token (with --url; "
                        "or $ROUTER_TOKEN; default: the api-token file of the settings directory)")
    parser.add_argument("--token", help="the TCP API's token; every local user can read a command line: prefer "
                        "$ROUTER_TOKEN or --token-file")
    parser.add_argument("--settings", metavar="DIR", help="the settings directory whose api-token --url uses")
    parser.add_argument("--json", action="store_true", help="print the answer as one JSON line")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session's id (see `router sessions`)")
    parser.add_argument("text", nargs="?", default="-", help="the message ('-' or none: read it from stdin)")
    _add_reach(parser)
    parser.add_argument("--event-id", help="the delivery's event id (default: a new one); resend with the same id")
    parser.add_argument("--card", action="store_true",
                        help="send it as a card, not as your own words (Claude Code sessions only)")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for the session's reply: answer once "
                        "the message is in the session")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait in all (default 300)")


def message_text(raw: str) -> str:
    """A message read from stdin: one trailing newline stripped (``\\n`` or
    ``\\r\\n``), nothing else."""
    if raw.endswith("\r\n"):
        return raw[:-2]
    return raw[:-1] if raw.endswith("\n") else raw


# --------------------------------------------------------------------------- where to post


class CommandTarget(NamedTuple):
    """Where a command posts: who (for messages), the base URL, the Unix
    socket (None: TCP), the headers, and the session's listing when the
    board gave it."""

    who: str
    base: str
    socket: str | None = None
    headers: dict[str, str] | None = None
    listing: dict[str, Any] | None = None


class TooSlow(Exception):
    """The command's ``--timeout`` passed before its answer came."""


class ExitWith(Exception):
    """The command stops with this exit status; stderr said why."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _say(command: str, text: str) -> None:
    print(f"router {command}: {text}", file=sys.stderr, flush=True)


def _print(body: Any) -> None:
    print(json.dumps(body, ensure_ascii=False), flush=True)


def _token(command: str, args: argparse.Namespace) -> str:
    """The TCP API's token: ``--token``, ``--token-file``, ``$ROUTER_TOKEN``,
    else the api-token file of the settings directory (router.tokens)."""
    from pathlib import Path

    from router.board.access import read_token, token_path
    from router.errors import Refusal
    from router.dirs import default_settings_dir
    from router.tokens import API_TOKEN_VARIABLE, secret_from

    settings = Path(args.settings) if args.settings else default_settings_dir(os.environ)
    try:
        given = secret_from(flag=args.token, file=args.token_file, env=os.environ, variable=API_TOKEN_VARIABLE)
        return given if given is not None else read_token(token_path(settings))
    except Refusal as refused:
        _say(command, str(refused))
        raise ExitWith(USAGE) from None


def _target(command: str, args: argparse.Namespace) -> CommandTarget:
    """Where to post (see the module docstring); raises :class:`ExitWith`
    once stderr said why there is nowhere."""
    if args.url is not None:
        if args.router is not None:
            _say(command, "give --url or --router, not both")
            raise ExitWith(USAGE)
        token = _token(command, args)
        return CommandTarget(args.url, args.url.rstrip("/"), headers={"authorization": f"Bearer {token}"})
    from router.board.client import BASE_URL, NO_ROUTER, holder_blocking
    from router.errors import Refusal

    try:
        found, board = holder_blocking(os.environ, args.session, router=args.router)
    except Refusal as refused:
        skipped = refused.data.get("skipped") or []
        for each in skipped:
            _say(command, f"left out {each['router']}: {each['error']}: {each['message']}")
        if any(each["error"] == "channel-off" for each in skipped):
            raise ExitWith(CLI_OFF_EXIT) from None  # the router may hold it, but takes nothing from the CLI
        _refusal(command, args, Refusal(refused.code, refused.message))  # its routers left out: on stderr above
        raise ExitWith(USAGE if refused.code in NO_ROUTER else REFUSED) from None
    for skipped in board.skipped:
        _say(command, f"left out {skipped.name}: {skipped.refusal}")
    listing = next((item for item in found.sessions if item.get("id") == args.session), None)
    return CommandTarget(f"router {found.name} ({found.socket})", BASE_URL, found.socket, listing=listing)


def _refusal(command: str, args: argparse.Namespace, refused: Refusal) -> None:
    """A refusal: on stderr, and as JSON on stdout with ``--json`` (as
    :meth:`Refusal.to_json` spells it)."""
    event_id = refused.data.get("eventId")
    resend = f" (resend with --event-id {event_id})" if type(event_id) is str else ""
    _say(command, f"{refused}{resend}")
    if getattr(args, "json", False):
        _print(refused.to_json())


def _answer_refused(answer: Any) -> Refusal:
    """The refusal a router answered with (a status not its success), as
    it spelled it (:meth:`Refusal.from_json`), data and all; ``not-a-router``
    when the answer is not one."""
    from router.errors import Refusal

    refused = Refusal.from_json(answer)
    return Refusal("not-a-router", str(answer)) if refused is None else refused


def _request(target: CommandTarget, method: str, path: str, *, timeout: float, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> Any:
    """One request to ``target`` (:func:`router._client_sync.request`)."""
    from router._client_sync import request

    every = {"x-router-channel": "cli", **(target.headers or {}), **(headers or {})}
    if target.socket is not None:
        return request(method, path, socket_path=target.socket, headers=every, body=body, timeout=timeout)
    return request(method, path, base_url=target.base, headers=every, body=body, timeout=timeout)


def _post(command: str, target: CommandTarget, path: str, body: Any, *, timeout: float,
          progress: Callable[[], Any] | None = None) -> tuple[int, Any]:
    """POST ``body`` as JSON to ``path`` of ``target``: the status and the
    JSON answer. Raises :class:`ExitWith` (2) once stderr said why there is
    none, :class:`TooSlow` after ``timeout`` seconds."""
    from router.errors import Refusal

    with _Ticking(progress):
        try:
            response = _request(target, "POST", path, timeout=timeout, body=json.dumps(body).encode(),
                                headers={"content-type": "application/json"})
        except Refusal as failed:
            if failed.code == "no-answer":
                raise TooSlow from None
            hint = "it may have just stopped" if target.socket is not None else "is `router serve` running?"
            _say(command, f"cannot-connect: {target.who}: {failed.message}; {hint}")
            raise ExitWith(USAGE) from None
    try:
        return response.status, response.json()
    except ValueError:
        _say(command, f"{target.base + path} answered {response.status} with no JSON; is it a router?")
        raise ExitWith(USAGE) from None


def _get(target: CommandTarget, path: str, *, timeout: float = 30.0) -> Any:
    """``GET path`` at ``target``: its JSON, or None when it has none."""
    from router.errors import Refusal

    try:
        response = _request(target, "GET", path, timeout=timeout)
        return response.json() if response.status == 200 else None
    except (Refusal, ValueError):
        return None


def _listing(target: CommandTarget, session: str, *, timeout: float = 30.0) -> dict[str, Any] | None:
    """``session`` as the router at ``target`` lists it (None when it does
    not, or cannot say: the post that follows reports why)."""
    body = _get(target, "/sessions?scope=router", timeout=timeout)
    listed = body.get("sessions") if type(body) is dict else None
    found = [item for item in listed or [] if type(item) is dict and item.get("id") == session] \
        if type(listed) is list else []
    return found[0] if found else None


class _Ticking:
    """Runs a progress line (:func:`_ticker`) in a thread while the block runs."""

    def __init__(self, progress: Callable[[threading.Event], None] | None) -> None:
        self._progress = progress
        self._thread: Any = None
        self._stop: Any = None

    def __enter__(self) -> None:
        if self._progress is None:
            return
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._progress, args=(self._stop,), name="progress", daemon=True)
        self._thread.start()

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()


def _ticker(command: str, what: str) -> Callable[[threading.Event], None]:
    """The progress line a terminal's stderr shows while a command waits."""

    def tick(stop: threading.Event) -> None:
        waited = 0
        try:
            while True:
                sys.stderr.write(f"\r\x1b[Krouter {command}: {what} ({waited} s)")
                sys.stderr.flush()
                if stop.wait(PROGRESS_INTERVAL):
                    return
                waited += 1
        finally:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()

    return tick


def exit_status(status: int, answer: Any) -> int:
    """A refusal's exit status (1, or 2 / 3 where the module docstring says)."""
    code = answer.get("error") if type(answer) is dict else None
    if code == "channel-off":
        return CLI_OFF_EXIT
    return USAGE if code in USAGE_CODES or status in (401, 421) else REFUSED


# --------------------------------------------------------------------------- router send


def summary(session: str, answer: dict[str, Any]) -> str:
    """The answer of a delivered message, as a person reads it: the reply's
    text, or what became of the message."""
    reply = answer.get("reply")
    if type(reply) is dict and reply.get("status") == "done":
        return str(reply.get("text", ""))
    again = " (answered from the record: it was sent before)" if answer.get("fromRecord") else ""
    if type(answer.get("operationId")) is str:  # a container session's operation
        mode = {"steer": ", steered into the running turn if one runs", "followUp": ""}.get(
            str(answer.get("whenBusy")), "")
        return f"delivered to {session} as operation {answer['operationId']}{mode}{again}"
    how = {"row": "written as a row", "prompt": "started as a prompt"}.get(str(answer.get("as")), "delivered")
    return f"{how} in {session}{again}"


def run(args: argparse.Namespace) -> int:
    import time

    if args.timeout <= 0:
        _say("send", "--timeout must be positive")
        return USAGE
    text = message_text(sys.stdin.read()) if args.text == "-" else args.text
    event_id = args.event_id or str(uuid.uuid4())
    body: dict[str, Any] = {"text": text, "eventId": event_id, "wait": not args.no_wait}
    if args.card:
        body["kind"] = "card"
    deadline = time.monotonic() + args.timeout
    try:
        target = _send_target(args)
        # A Claude Code session's reply is the end of the turn the message
        # starts (or joins): what its transcript holds before is the mark.
        waits = (target.listing or {}).get("kind") == "claude-code" and not args.no_wait
        before = _messages(target, args.session) if waits else None
        progress = _ticker("send", f"waiting for {args.session}") if sys.stderr.isatty() else None
        status, answer = _post("send", target, f"/sessions/{quote(args.session, safe='')}/messages", body,
                               timeout=args.timeout, progress=progress)
        if before is not None and _started_a_turn(status, answer):
            answer["reply"] = _claude_reply(target, args.session, _drawn(before), deadline=deadline,
                                            progress=progress)
    except ExitWith as stop:
        return stop.status
    except TooSlow:
        from router.errors import Refusal

        _refusal("send", args, Refusal("timeout", f"no answer within {args.timeout:g} s; the same id is written once",
                                       eventId=event_id))
        return REFUSED
    return _answered(args, status, answer)


def _send_target(args: argparse.Namespace) -> CommandTarget:
    """Where ``router send`` posts, with the session's listing (asked of
    the router at ``--url`` when the board did not give it); raises
    :class:`ExitWith` (``card-meaningless``: a card to a container session)."""
    target = _target("send", args)
    if (args.card or not args.no_wait) and target.listing is None:
        target = CommandTarget(target.who, target.base, target.socket, target.headers, _listing(target, args.session))
    if args.card and (target.listing or {}).get("kind") == "container":
        _say("send", f"card-meaningless: {args.session} is a container session, where a card is the same "
             "prompt as your own words; send it without --card")
        raise ExitWith(USAGE)
    return target


def _started_a_turn(status: int, answer: Any) -> bool:
    """Whether a Claude Code session's answer is a message in it now (a
    prompt it started, or a row in the running turn), not a resend answered
    from the record."""
    return (status == 200 and type(answer) is dict and answer.get("status") == "delivered"
            and answer.get("as") in ("prompt", "row") and not answer.get("fromRecord"))


#: Seconds between two looks at a Claude Code session while ``router send``
#: waits for its turn to end (ours: a turn takes seconds; a look is two
#: small local requests).
CLAUDE_POLL = 0.2


def _messages(target: CommandTarget, session: str, *, timeout: float = 30.0) -> list[Any]:
    """``session``'s transcript at ``target`` ([] when it cannot say)."""
    body = _get(target, f"/sessions/{quote(session, safe='')}/messages", timeout=timeout)
    listed = body.get("messages") if type(body) is dict else None
    return listed if type(listed) is list else []


def _drawn(messages: list[Any]) -> dict[str, str]:
    """Each message's id and text: what a transcript held (a message may
    be updated in place, and ``/clear`` empties the transcript, so a
    count would not do)."""
    return {str(m.get("id")): _text_of(m) for m in messages if type(m) is dict}


def _text_of(message: Any) -> str:
    parts = message.get("parts") if type(message) is dict else None
    return "".join(part.get("text", "") for part in parts or [] if type(part) is dict and part.get("type") == "text")


def _claude_reply(target: CommandTarget, session: str, before: dict[str, str], *, deadline: float,
                  progress: Callable[[threading.Event], None] | None = None) -> dict[str, Any]:
    """Wait until the Claude Code session's turn ends with an answer it did
    not hold when the message was sent (``before``: :func:`_drawn`), a new
    assistant message or one whose text changed: ``{status: "done",
    text}``, or ``{status: "unanswered", reason}`` when the session closes
    or cannot be reached. :class:`TooSlow` once ``deadline``
    (``time.monotonic()``) passes."""
    import time

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TooSlow
        return min(remaining, 30.0)

    with _Ticking(progress):
        while True:
            listing = _listing(target, session, timeout=left())
            state = (listing or {}).get("state")
            if state in ("closed", "unreachable"):
                return {"status": "unanswered", "reason": f"the session is {state}"}
            messages = _messages(target, session, timeout=left())
            last = messages[-1] if messages and type(messages[-1]) is dict else {}
            fresh = last.get("role") == "assistant" and before.get(str(last.get("id"))) != _text_of(last)
            if listing is not None and not listing.get("busy") and state != "working" and fresh:
                return {"status": "done", "text": _text_of(last)}
            time.sleep(min(CLAUDE_POLL, left()))


def _answered(args: argparse.Namespace, status: int, answer: Any) -> int:
    if status != 200 or type(answer) is not dict:
        _refusal("send", args, _answer_refused(answer))
        return exit_status(status, answer)
    if args.json:
        _print(answer)
    reply = answer.get("reply")
    if answer.get("status") == "parked":
        # Kept, not failed: it goes in once at the reset (docs/limits.md).
        if not args.json:
            print(f"kept: {answer.get('message')}", flush=True)
        return DONE
    if answer.get("status") != "delivered":
        _say("send", f"dropped: {answer.get('reason') or answer.get('message') or 'the session dropped it'}")
        return REFUSED
    if type(reply) is dict:
        return _replied(args, answer, reply)
    if not args.json:
        print(summary(args.session, answer), flush=True)
    return DONE


def _replied(args: argparse.Namespace, answer: dict[str, Any], reply: dict[str, Any]) -> int:
    """The exit status of a delivered message the session replied to."""
    if reply.get("kept") is True:
        # The provider's usage limit ended the turn: kept, it runs again at the reset.
        if not args.json:
            print(f"kept: {reply.get('reason')}; {args.session} is parked and runs it again once the limit "
                  "resets (router sessions shows when)", flush=True)
        return DONE
    if reply.get("status") != "done":
        operation = f" (operation {reply['operationId']})" if reply.get("operationId") else ""
        _say("send", f"unanswered: {reply.get('reason')}{operation}")
        return REFUSED
    if not args.json:
        print(summary(args.session, answer), flush=True)
    return DONE


# --------------------------------------------------------------------------- router abort / resume


def configure_abort(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session's id (see `router sessions`)")
    parser.add_argument("operation", nargs="?", help="the operation to stop (default: the running turn and "
                        "every queued one)")
    _add_reach(parser)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (default 60)")


def run_abort(args: argparse.Namespace) -> int:
    """``router abort SESSION [OPERATION]``: ``POST /sessions/<id>/abort``
    at the router that holds it."""
    body = {"operationId": args.operation} if args.operation else {}

    def said(answer: dict[str, Any]) -> str:
        # With no operation the host answers true whatever was open (as the reference).
        if not args.operation:
            return f"stopped every open operation of {args.session} (if any ran)"
        return f"aborted operation {args.operation} in {args.session}"

    def refused(answer: dict[str, Any]) -> Refusal | None:
        from router.errors import Refusal

        if not args.operation or answer.get("aborted"):
            return None
        return Refusal("unknown-operation", f"operation {args.operation} is not open in {args.session} (it settled, "
                       "or was never sent there); `router send --json` prints an operation's id")

    return _simple("abort", args, "abort", body, said, refused)


def configure_resume(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the stopped session's id")
    _add_reach(parser)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (default 60)")


def run_resume(args: argparse.Namespace) -> int:
    """``router resume SESSION``: ``POST /sessions/<id>/resume`` at the
    router that holds it. Exit 0: resumed, or it was not stopped
    (``resumed: false``); 1: refused (the limit is still reached:
    ``limit-reached``; ``unknown-session`` ...); 2: a usage or connection
    error."""

    def said(answer: dict[str, Any]) -> str:
        if answer.get("resumed") and "parked" in (answer.get("was") or {}):
            return f"{args.session} resumed from its park: its kept messages go in now"
        return f"{args.session} takes messages again" if answer.get("resumed") else f"{args.session} was not stopped"

    return _simple("resume", args, "resume", {}, said)


def configure_cancel_park(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the parked session's id")
    _add_reach(parser)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (default 60)")


def run_cancel_park(args: argparse.Namespace) -> int:
    """``router cancel-park SESSION``: ``POST /sessions/<id>/cancel-park``
    at the router that holds it: the park ends, its kept messages are
    dropped (unanswered ``park-cancelled``: resend them). Exit 0: cancelled,
    or it was not parked; 1: refused; 2: a usage or connection error."""

    def said(answer: dict[str, Any]) -> str:
        if not answer.get("cancelled"):
            return f"{args.session} was not parked"
        dropped = answer.get("dropped") or []
        return f"{args.session} is no longer parked; {len(dropped)} kept message(s) dropped: resend them" + (
            f" ({', '.join(dropped)})" if dropped else "")

    return _simple("cancel-park", args, "cancel-park", {}, said)


def _simple(command: str, args: argparse.Namespace, route: str, body: dict[str, Any],
            said: Callable[[dict[str, Any]], str],
            refused: Callable[[dict[str, Any]], Refusal | None] = lambda answer: None) -> int:
    if args.timeout <= 0:
        _say(command, "--timeout must be positive")
        return USAGE
    try:
        target = _target(command, args)
        status, answer = _post(command, target, f"/sessions/{quote(args.session, safe='')}/{route}", body,
                               timeout=args.timeout)
    except ExitWith as stop:
        return stop.status
    except TooSlow:
        _say(command, f"timeout: no answer within {args.timeout:g} s")
        return USAGE
    if status != 200 or type(answer) is not dict:
        _refusal(command, args, _answer_refused(answer))
        return exit_status(status, answer)
    said_no = refused(answer)
    if said_no is not None:  # the router's answer is a "no" of ours (router abort: nothing of that id to stop)
        _refusal(command, args, said_no)
        return REFUSED
    if args.json:
        _print(answer)
    else:
        print(said(answer), flush=True)
    return DONE


# --------------------------------------------------------------------------- router launch


def configure_launch(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the new container session's id")
    parser.add_argument("--harness", help="what its daemon runs: echo, claude-code, codex or MODULE:ATTR (default: "
                        "the launcher's, echo); the in-process launcher runs echo only")
    parser.add_argument("--instance", help="the instance it is launched (and metered) as (default: the router's)")
    _add_reach(parser)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (default 60)")


def _launch_target(args: argparse.Namespace) -> CommandTarget:
    """Where ``router launch`` posts: ``--url``, ``--router NAME``, else the
    one ``router serve`` of this user (a session that does not exist yet
    has no holder to find)."""
    if args.url is not None or args.router is not None:
        return _target("launch", args) if args.url is not None else _named_target(args)
    from router.board.client import BASE_URL, survey_blocking
    from router.errors import Refusal

    try:
        board = survey_blocking(os.environ)
    except Refusal as refused:
        _say("launch", str(refused))
        raise ExitWith(USAGE) from None
    serving = [each for each in board.reached if each.info.get("command") == "serve"]
    if len(serving) != 1:
        names = ", ".join(each.name for each in serving)
        _say("launch", "no-router: no `router serve` of yours is running; start one" if not serving else
             f"ambiguous-router: {len(serving)} `router serve` run ({names}); name one with --router NAME")
        raise ExitWith(USAGE)
    found = serving[0]
    return CommandTarget(f"router {found.name} ({found.socket})", BASE_URL, found.socket)


def _named_target(args: argparse.Namespace) -> CommandTarget:
    from router.board.client import BASE_URL, NO_ROUTER, holder_blocking
    from router.errors import Refusal

    try:  # with a router named, it is asked, not looked for
        found, _ = holder_blocking(os.environ, args.session, router=args.router)
    except Refusal as refused:
        _say("launch", str(refused))
        raise ExitWith(USAGE if refused.code in NO_ROUTER else REFUSED) from None
    return CommandTarget(f"router {found.name} ({found.socket})", BASE_URL, found.socket)


def run_launch(args: argparse.Namespace) -> int:
    """``router launch SESSION``: ``POST /sessions`` at the router; its
    launcher starts the session's daemon on the first message. Exit 0 when
    created (or it existed), 1 when refused, 2 on a usage or connection error."""
    if args.timeout <= 0:
        _say("launch", "--timeout must be positive")
        return USAGE
    body: dict[str, Any] = {"id": args.session}
    if args.harness:
        body["harness"] = args.harness
    if args.instance:
        body["instance"] = args.instance
    try:
        target = _launch_target(args)
        status, answer = _post("launch", target, "/sessions", body, timeout=args.timeout)
    except ExitWith as stop:
        return stop.status
    except TooSlow:
        _say("launch", f"timeout: no answer within {args.timeout:g} s")
        return USAGE
    if status not in (200, 201) or type(answer) is not dict:
        _refusal("launch", args, _answer_refused(answer))
        return exit_status(status, answer)
    if args.json:
        _print(answer)
    else:
        print(f"{answer.get('id')}: a container session on {target.who} (harness {answer.get('harness')}); "
              "its daemon starts with its first message", flush=True)
    return DONE
