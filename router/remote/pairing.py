"""Pairing codes: the one-time codes a new device trades for its credential.

Theory of operation
-------------------

:class:`PairingBook` is sans-IO: every input carries ``now`` (seconds, any
clock that only moves forward), nothing awaits, nothing reads a clock.

- **Issue.** :meth:`PairingBook.issue` makes a code of :data:`CODE_BYTES`
  random bytes (``secrets.token_urlsafe``: 128 bits, 22 characters), good
  for :data:`CODE_TTL` seconds and for one use. The book keeps only the
  code's SHA-256, never the code: the code goes to the person who asked
  (the terminal's QR code, the local page) and, in the URL's fragment, to
  the phone, never to a log. At most :data:`MAX_OPEN` codes are open at
  once; a new one past that closes the oldest.
- **Redeem.** :meth:`PairingBook.redeem` takes a code: an open code is
  used up (the caller then makes the device); a code seen before is
  refused as what it is now (``pairing-code-used``, ``pairing-code-expired``)
  and is no try at guessing; any other text is a wrong try
  (``bad-pairing-code``).
- **Lockout.** :data:`MAX_WRONG` wrong tries within :data:`WRONG_WINDOW`
  seconds lock pairing for :data:`LOCKOUT` seconds: every redeem, a right
  code included, and every issue are refused ``pairing-locked`` until then,
  so a guesser gets a handful of tries per lockout, against 2**128 codes.
  The lock is the router's, not a network address's: a guesser cannot dodge
  it by changing address (the price: a stranger can keep pairing locked;
  pairing again after the lockout, from the terminal, is the remedy).
- **Forget.** A used or expired code is remembered (its hash) until
  :data:`REMEMBER` seconds after its end, so the refusal can say which it
  was; after that it is as unknown as any guess.

Invariants (checked by ``tests/remote/test_pairing.py`` with hypothesis):
a code redeems at most once; never after its expiry; never while locked; a
code never issued never redeems; the book's memory is bounded.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import deque
from typing import Callable, Final

import attrs

from router.errors import Refusal

__all__ = ["PairingBookStatistics", "CODE_TTL", "Issued", "LOCKOUT", "MAX_WRONG", "PairingBook", "Redeemed"]

#: Random bytes in a code (ours: 128 bits, past guessing even without the lockout).
CODE_BYTES: Final = 16
#: Seconds a code is good for (the brief: five minutes).
CODE_TTL: Final = 300.0
#: Wrong tries, within :data:`WRONG_WINDOW` seconds, that lock pairing (ours: a
#: person mistyping twice is not locked out; a script is stopped at once).
MAX_WRONG: Final = 5
WRONG_WINDOW: Final = 600.0
#: Seconds pairing stays locked (ours: long enough to make guessing pointless,
#: short enough that a person who was locked out waits a cup of tea).
LOCKOUT: Final = 600.0
#: Codes open at once (ours); an older one is closed by a new one past this.
MAX_OPEN: Final = 8
#: Seconds a used or expired code is remembered after its end, so its
#: refusal says which it was.
REMEMBER: Final = 3600.0
#: Remembered codes at most (bounds memory whatever the callers do).
MAX_REMEMBERED: Final = 256


def _digest(code: str) -> bytes:
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).digest()


@attrs.frozen
class Issued:
    code: str
    expires_at: float


@attrs.frozen
class Redeemed:
    """A right code, now used up: the caller makes the device."""

    issued_at: float


@attrs.define
class _Code:
    issued_at: float
    expires_at: float
    #: ``open``, ``used`` (or, past its end, it reads as ``expired``).
    used: bool = False


@attrs.frozen
class PairingBookStatistics:
    """What a :class:`PairingBook` holds: codes open (unused, unexpired at
    ``now``), codes remembered, wrong tries counted, the lockout's end, and
    the codes issued, redeemed and refused."""

    open: int
    remembered: int
    wrong: int
    locked_until: float | None
    issued: int
    redeemed: int
    refused: int


class PairingBook:
    """The open and remembered codes, the wrong tries and the lock (see the
    module docstring)."""

    def __init__(self, *, ttl: float = CODE_TTL, max_wrong: int = MAX_WRONG, window: float = WRONG_WINDOW,
                 lockout: float = LOCKOUT, make_code: Callable[[], str] | None = None) -> None:
        self.ttl, self.max_wrong, self.window, self.lockout = ttl, max_wrong, window, lockout
        self._make_code = make_code or (lambda: secrets.token_urlsafe(CODE_BYTES))
        self._codes: dict[bytes, _Code] = {}
        self._wrong: deque[float] = deque()
        self._locked_until: float | None = None
        self.issued = self.redeemed = self.refused = 0

    def __repr__(self) -> str:
        return (f"<PairingBook open={self.statistics().open} remembered={len(self._codes)} "
                f"wrong={len(self._wrong)} locked_until={self._locked_until}>")

    def statistics(self, now: float | None = None) -> PairingBookStatistics:
        open_ = sum(1 for c in self._codes.values() if not c.used and (now is None or now < c.expires_at))
        return PairingBookStatistics(open=open_, remembered=len(self._codes), wrong=len(self._wrong),
                                     locked_until=self._locked_until, issued=self.issued, redeemed=self.redeemed,
                                     refused=self.refused)
    # ------------------------------------------------------------------ inputs

    def issue(self, now: float) -> Issued | Refusal:
        """A new code, or ``pairing-locked``."""
        self._tidy(now)
        locked = self._lock_refusal(now)
        if locked is not None:
            return locked
        open_codes = sorted((c.issued_at, key) for key, c in self._codes.items() if not c.used and now < c.expires_at)
        for _, key in open_codes[: max(0, len(open_codes) - MAX_OPEN + 1)]:
            self._codes[key].used = True  # closed by a newer code: it reads as used
        code = self._make_code()
        self._codes[_digest(code)] = _Code(issued_at=now, expires_at=now + self.ttl)
        self.issued += 1
        return Issued(code=code, expires_at=now + self.ttl)

    def redeem(self, code: str, now: float) -> Redeemed | Refusal:
        """Use ``code`` up, or the refusal (see the module docstring)."""
        self._tidy(now)
        refused = self._lock_refusal(now) or self._check(code, now)
        if refused is not None:
            self.refused += 1
            return refused
        entry = self._codes[_digest(code)]
        entry.used = True
        self.redeemed += 1
        return Redeemed(issued_at=entry.issued_at)

    # ------------------------------------------------------------------ decisions

    def _check(self, code: str, now: float) -> Refusal | None:
        entry = self._codes.get(_digest(code)) if type(code) is str else None
        if entry is None:
            self._wrong.append(now)
            if len(self._wrong) >= self.max_wrong:
                self._locked_until = now + self.lockout
                self._wrong.clear()
            return Refusal("bad-pairing-code", "this pairing code is not one the router gave; run `router pair` "
                           "again and scan the new code")
        if entry.used:
            return Refusal("pairing-code-used", "this pairing code was used already; each code pairs one device "
                           "once: run `router pair` again for another")
        if now >= entry.expires_at:
            return Refusal("pairing-code-expired", f"this pairing code expired ({self.ttl / 60:g} minutes after it "
                           "was made); run `router pair` again and scan the new code")
        return None

    def _lock_refusal(self, now: float) -> Refusal | None:
        if self._locked_until is None or now >= self._locked_until:
            self._locked_until = None
            return None
        wait = max(1, round(self._locked_until - now))
        return Refusal("pairing-locked", f"pairing is locked for {wait} more seconds after {self.max_wrong} wrong "
                       "codes; wait, then run `router pair` again", retryAfter=wait)

    def _tidy(self, now: float) -> None:
        """Forget what is past remembering; bound the memory."""
        while self._wrong and now - self._wrong[0] > self.window:
            self._wrong.popleft()
        stale = [key for key, c in self._codes.items() if now > c.expires_at + REMEMBER]
        for key in stale:
            del self._codes[key]
        if len(self._codes) > MAX_REMEMBERED:
            closed = sorted((c.expires_at, key) for key, c in self._codes.items() if c.used or now >= c.expires_at)
            for _, key in closed[: len(self._codes) - MAX_REMEMBERED]:
                del self._codes[key]
