"""usage-source ``claude-transcript``: token usage from Claude Code's JSONL
transcript of a session.

Covers sessions reached through the mod link (``reach.via == "mod-link"``).

The transcript
--------------

Claude Code appends one JSON object per line to
``<config>/projects/<project>/<session id>.jsonl``, where ``<config>`` is
``CLAUDE_CONFIG_DIR`` or ``~/.claude``. An assistant line is
``{"type": "assistant", "message": {"id", "usage": {...}}, ...}`` and its
usage has ``input_tokens``, ``output_tokens``,
``cache_creation_input_tokens`` and ``cache_read_input_tokens``. One API
message is written as several lines (one per content block) that share the
message ``id`` and repeat its usage, so usage is taken once per message id,
from the last line with that id.

Reading
-------

The first read of a turn answers a mark: the byte offset just after the last
complete line (a line still being written has no newline yet and is left for
later), the transcript's path, and the message ids already counted. The
second read takes the bytes from the offset to the end, up to
``MAX_TURN_BYTES``, drops the piece after the last newline (a partial line),
skips lines that are not JSON objects, longer than ``MAX_LINE_BYTES``, or not
assistant messages with usage, and sums the four kinds over message ids not
counted before. A turn that wrote more than ``MAX_TURN_BYTES`` is unknown
(nothing past the bound is read), as is one with no assistant usage, a
transcript that shrank (rewritten) and a transcript that cannot be found.

Options (``options.usage-source.claude-transcript``): ``config_dir``, to read
transcripts from another Claude Code configuration directory.
"""

import json
import os
import re

import trio

from router.errors import Refusal

INTERFACE_VERSION = 1

#: The most bytes one turn's read takes. A long agentic turn with large tool
#: results writes megabytes; 32 MiB is far above that and still bounded.
MAX_TURN_BYTES = 32 * 1024 * 1024
#: The longest line parsed. Longer lines (a huge tool result) are skipped:
#: they are never an assistant message's usage line of any size that matters.
MAX_LINE_BYTES = 8 * 1024 * 1024
#: How many counted message ids a mark carries, so a message split over the
#: bracket's edge is not counted twice. A turn has far fewer messages.
MAX_MARK_IDS = 512
#: How many project directories are searched for a session's transcript.
MAX_PROJECTS = 10_000

#: Claude Code's session ids are UUIDs; anything that is not one plain path
#: segment is refused before it reaches a path.
_SESSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")

_USAGE_KEYS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cache_creation": "cache_creation_input_tokens",
    "cache_read": "cache_read_input_tokens",
}


def _config_dir(options, env):
    configured = options.get("config_dir") if type(options) is dict else None
    if type(configured) is str and configured:
        return configured
    if env.get("CLAUDE_CONFIG_DIR"):
        return env["CLAUDE_CONFIG_DIR"]
    if env.get("HOME"):
        return os.path.join(env["HOME"], ".claude")
    return None


def _find(session, options, env):
    """The transcript's path, or None when there is none (yet)."""
    if type(session) is not str or not _SESSION.fullmatch(session):
        raise Refusal("bad-session", f"{session!r} is not a Claude Code session id")
    config = _config_dir(options, env)
    if config is None:
        return None
    projects = os.path.join(config, "projects")
    try:
        entries = os.scandir(projects)
    except OSError:
        return None
    with entries:
        for count, entry in enumerate(entries):
            if count >= MAX_PROJECTS:
                break
            candidate = os.path.join(projects, entry.name, session + ".jsonl")
            if os.path.isfile(candidate):
                return candidate
    return None


def _end_of_complete_lines(f, size):
    """The offset just after the last newline of the file, searching back at
    most MAX_LINE_BYTES (a longer partial line is skipped whole)."""
    position = size
    floor = max(0, size - MAX_LINE_BYTES)
    while position > floor:
        start = max(floor, position - 65536)
        f.seek(start)
        chunk = f.read(position - start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        position = start
    return size if floor > 0 else 0


def _usage_of(line):
    """(message id, the four kinds) of an assistant line with usage, or None."""
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if type(entry) is not dict or entry.get("type") != "assistant":
        return None
    message = entry.get("message")
    if type(message) is not dict or type(message.get("usage")) is not dict:
        return None
    raw = message["usage"]
    usage = {}
    for kind, key in _USAGE_KEYS.items():
        value = raw.get(key, 0)
        if value is None:
            value = 0
        if type(value) is not int or value < 0:
            return None
        usage[kind] = value
    ident = message.get("id") or entry.get("uuid")
    return (ident if type(ident) is str else None), usage


def _begin(path):
    if path is None:
        return {"path": None, "offset": 0, "ids": []}
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = _end_of_complete_lines(f, size)
    except FileNotFoundError:
        return {"path": None, "offset": 0, "ids": []}
    return {"path": path, "offset": offset, "ids": []}


def _readings(data, seen):
    """The usage of each message on the complete lines ``data`` holds (not
    one of ``seen``; the last line of a message wins), and of the lines that
    name no message."""
    per_message = {}
    anonymous = []
    for line in data.split(b"\n"):
        if not line or len(line) > MAX_LINE_BYTES:
            continue
        found = _usage_of(line)
        if found is None:
            continue
        ident, usage = found
        if ident is None:
            anonymous.append(usage)
        elif ident not in seen:
            per_message[ident] = usage  # the last line of a message wins
    return per_message, anonymous


def _end(mark, path):
    if path is None:
        return {"mark": mark, "usage": None}
    offset = mark["offset"] if mark.get("path") == path else 0
    seen = list(mark.get("ids") or [])
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < offset:  # rewritten or truncated: the bracket is lost
                return {"mark": _begin(path), "usage": None}
            if size - offset > MAX_TURN_BYTES:
                return {"mark": {**_begin(path), "ids": seen}, "usage": None}
            f.seek(offset)
            data = f.read(size - offset)
    except FileNotFoundError:
        return {"mark": mark, "usage": None}
    complete = data.rfind(b"\n") + 1  # 0 when there is no complete line
    per_message, anonymous = _readings(data[:complete], seen)
    new_mark = {
        "path": path,
        "offset": offset + complete,
        "ids": (seen + list(per_message))[-MAX_MARK_IDS:],
    }
    readings = list(per_message.values()) + anonymous
    if not readings:
        return {"mark": new_mark, "usage": None}
    total = {kind: 0 for kind in _USAGE_KEYS}
    for usage in readings:
        for kind in total:
            total[kind] += usage[kind]
    return {"mark": new_mark, "usage": total}


async def read_turn(request, deps):
    reach = request.get("reach")
    if type(reach) is not dict or reach.get("via") != "mod-link":
        return None
    options = request.get("options") or {}
    env = deps.get("env") if type(deps.get("env")) is dict else dict(os.environ)
    mark = request["mark"]
    transcript = request.get("transcript")
    if type(transcript) is not str or not transcript:
        transcript = None
    if mark is not None:
        if type(mark) is not dict or type(mark.get("offset")) is not int:
            raise Refusal("bad-mark", "the claude-transcript mark is not one it made")
        transcript = transcript or mark.get("path")

    def work():
        path = transcript or _find(request.get("session"), options, env)
        if mark is None:
            return {"mark": _begin(path), "usage": None}
        return _end(mark, path)

    # Only reads: a read the broker's deadline gives up on is abandoned, and
    # its result dropped, so the deadline holds on a slow file system too.
    return await trio.to_thread.run_sync(work, abandon_on_cancel=True)
