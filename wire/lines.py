"""Newline-delimited input, without I/O: bytes in, complete lines out.

Both line-oriented peers of ours read through this one splitter: an ACP
agent's JSON-RPC (``router.acp.jsonrpc``: the SDKs' ``ndJsonStream`` writes
``JSON.stringify(message) + "\\n"``) and an agent CLI's JSON lines
(``router.daemon.adapters.process_per_turn``: ``claude -p --output-format
stream-json``, ``codex exec --json``).

A line is the bytes before a ``\\n`` (the newline not included; a ``\\r``
before it is the reader's to strip). A line longer than ``max_line`` bytes
is a flood: it is dropped whole, the moment the buffer passes the bound (so
memory stays bounded however long the line runs), counted in
:attr:`LineSplitter.dropped`, and the bytes up to its newline are skipped;
the lines after it come out as usual. Feeding the same bytes in any chunks
gives the same lines (tested byte by byte).
"""

from __future__ import annotations

__all__ = ["LineSplitter"]


class LineSplitter:
    """Bytes in, complete lines out (see the module docstring). A final line
    without a newline comes out of :meth:`close`."""

    def __init__(self, *, max_line: int) -> None:
        self._buffer = bytearray()
        self._max_line = max_line
        self._skipping = False
        #: Lines dropped for being longer than ``max_line``.
        self.dropped = 0

    def __repr__(self) -> str:
        return f"<LineSplitter buffered={len(self._buffer)} dropped={self.dropped}>"

    @property
    def buffered(self) -> int:
        """Bytes of the line not complete yet."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """The lines ``data`` completes, in order. A line that grows past
        ``max_line`` is dropped (``dropped`` goes up) after them."""
        lines: list[bytes] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if self._skipping:
                self._skipping = False
            else:
                self._buffer += data[start:end]
                lines.append(bytes(self._buffer))
                self._buffer.clear()
            start = end + 1
        if not self._skipping:
            self._buffer += data[start:]
            if len(self._buffer) > self._max_line:
                self._buffer.clear()
                self._skipping = True
                self.dropped += 1
        return lines

    def close(self) -> bytes | None:
        """The input ended: its last line when it had no newline (None when
        there is none, or it was being dropped)."""
        if self._skipping or not self._buffer:
            self._skipping = False
            return None
        line = bytes(self._buffer)
        self._buffer.clear()
        return line
