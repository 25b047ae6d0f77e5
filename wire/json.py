"""The JSON rules both wires share, written once.

Both peers of each wire are JavaScript programs or mirror one (the reference
container daemon and the Claude Code mod), so "JSON" here means what
``JSON.parse`` and ``JSON.stringify`` do, not what Python's ``json`` does by
default. The differences this module closes:

- **Numbers.** JavaScript has one number type. :func:`loads` turns every JSON
  number into the double ``JSON.parse`` would make, then gives it back as an
  ``int`` when that double is integral and within ``±2**53`` (so ``1.0`` and
  ``1e3`` are the counts ``1`` and ``1000``, as in JavaScript) and as a
  ``float`` otherwise. A literal too large for a double becomes ``±inf``, as
  ``JSON.parse("1e400")`` is ``Infinity``; it is not refused here, because the
  reference refuses a non-finite number only where it checks a payload (see
  :func:`is_json`). The literals ``NaN`` and ``Infinity`` are not JSON and are
  refused, as ``JSON.parse`` refuses them.
- **Values.** :func:`is_json` is the reference's ``isJson``: ``None``, bools,
  strings, finite numbers, lists of JSON values and dicts with string keys and
  JSON values.
- **Counts.** :func:`is_count` is the reference's ``isCount``
  (``Number.isSafeInteger(n) && n >= 0``): an ``int`` that is not a ``bool``,
  from 0 to ``2**53 - 1``.
- **Text.** :func:`dumps` writes what ``JSON.stringify`` writes: no spaces,
  non-ASCII characters as themselves, lone surrogates as ``\\udXXX`` escapes,
  numbers in JavaScript's shortest form (``1`` not ``1.0``, ``1e-7`` not
  ``1e-07``, ``100000000000000000000`` not ``1e+20``).
- **Length.** :func:`js_length` counts UTF-16 code units, which is what
  ``string.length`` measures and what ``MAX_CHUNK_CHARS`` bounds.

- **Depth.** A document nested deeper than :data:`MAX_DEPTH` (256 arrays and
  objects) is refused by :func:`loads`, by :func:`is_json` and by
  :func:`dumps`, so no reader ever meets a value it cannot handle and no
  writer writes what a reader refuses. Every check of depth is iterative: a
  hostile value 100,000 levels deep is a "no", never a ``RecursionError``.
  V8's ``JSON.parse`` is iterative and takes much deeper documents; see
  :data:`MAX_DEPTH` for why ours stops at 256.
"""

from __future__ import annotations

import json as _json
import math
import re
from itertools import accumulate
from typing import Any, Final, TypeAlias

__all__ = [
    "ABSENT",
    "Absent",
    "Encoded",
    "JsonError",
    "JsonValue",
    "MAX_DEPTH",
    "MAX_SAFE_INTEGER",
    "dumps",
    "exceeds_depth",
    "is_count",
    "is_json",
    "js_length",
    "js_number",
    "json_length",
    "loads",
    "loads_finite",
    "NotFinite",
]

#: ``Number.MAX_SAFE_INTEGER``: the largest count either wire carries.
MAX_SAFE_INTEGER: Final = 2**53 - 1

#: The deepest nesting of arrays and objects either wire reads or writes
#: (``[]`` is depth 1, ``[[]]`` depth 2). Ours: the reference's peers set no
#: limit (V8's ``JSON.parse`` is iterative), but in Python the stdlib's
#: decoder and encoder, ``==`` and ``repr`` each spend one level of the
#: interpreter's recursion limit (1,000 by default) per level of nesting,
#: and ``copy.deepcopy`` and ``pickle`` two, wherever a value is parsed,
#: written, compared, shown or copied. 256 leaves the deepcopy of the
#: deepest value (512 levels) the rest of the stack for its caller's own
#: frames (a Trio task under Hypercorn runs about 60 deep, a test under
#: pytest and hypothesis about 150), and it is far above real traffic: the
#: deepest thing either wire carries is a tool's input or a content block,
#: a dozen levels at most.
MAX_DEPTH: Final = 256

#: A JSON value as Python holds it. Dicts and lists are plain, and mutable:
#: a payload passes through the wire untouched, so nothing here copies it.
JsonValue: TypeAlias = Any


class Absent:
    """The type of :data:`ABSENT`: an optional field that is not there at all,
    as opposed to one that is there and ``null``."""

    _instance: "Absent | None" = None

    def __new__(cls) -> "Absent":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "ABSENT"


#: The one :class:`Absent` value.
ABSENT: Final = Absent()


class JsonError(ValueError):
    """The text is not JSON as ``JSON.parse`` reads it."""


# --------------------------------------------------------------------------- parsing


def _number(literal: str) -> int | float:
    """One JSON number literal, as the double JavaScript makes of it."""
    value = float(literal)  # correctly rounded, like V8; overflows to ±inf
    if value.is_integer() and -(2**53) <= value <= 2**53:
        return int(value)
    return value


def _refuse_constant(name: str) -> Any:
    raise JsonError(f"{name} is not a JSON value")


def _integer(literal: str) -> int | float:
    """An integer literal: exact in a double up to 15 digits (the C scanner
    hands the literal over; ``int`` is the fast path)."""
    return int(literal) if len(literal) < 16 else _number(literal)


_decoder = _json.JSONDecoder(
    parse_float=_number,
    parse_int=_integer,
    parse_constant=_refuse_constant,
    strict=True,  # no raw control characters inside strings, as JSON.parse
)


def loads(text: str) -> JsonValue:
    """Parse ``text`` as ``JSON.parse`` would.

    Raises :class:`JsonError` for anything ``JSON.parse`` refuses, and for a
    text nested deeper than :data:`MAX_DEPTH` (checked before parsing, so
    the answer never depends on how deep the caller's stack is).
    """
    return _decode(text, _decoder)


def _decode(text: str, decoder: _json.JSONDecoder) -> JsonValue:
    if type(text) is not str:
        raise JsonError(f"JSON text must be a str, not {type(text).__name__}")
    if exceeds_depth(text):
        raise JsonError(_TOO_DEEP)
    try:
        return decoder.decode(text)
    except JsonError:
        raise
    except (ValueError, RecursionError) as exc:
        # RecursionError: only a caller already near the recursion limit.
        raise JsonError(str(exc) or type(exc).__name__) from None


class NotFinite(JsonError):
    """:func:`loads_finite`: the text holds a number literal that overflows
    a double (``JSON.parse`` reads ``1e400`` as ``Infinity``)."""


def _finite_number(literal: str) -> int | float:
    value = _number(literal)
    if value in _INFINITIES:
        raise NotFinite(f"{literal[:40]} overflows a double")
    return value


def _finite_integer(literal: str) -> int | float:
    return int(literal) if len(literal) < 16 else _finite_number(literal)


_INFINITIES: Final = (math.inf, -math.inf)

_finite_decoder = _json.JSONDecoder(
    parse_float=_finite_number,
    parse_int=_finite_integer,
    parse_constant=_refuse_constant,
    strict=True,
)


def loads_finite(text: str) -> JsonValue:
    """:func:`loads` for a text whose every number is finite: raises
    :class:`NotFinite` (a :class:`JsonError`) for one that overflows, where
    :func:`loads` returns an infinity. So what it returns passes
    :func:`is_json` whole (nesting is checked before parsing, numbers as
    they are read), and a parser may skip that walk."""
    return _decode(text, _finite_decoder)


_TOO_DEEP: Final = f"nested deeper than {MAX_DEPTH} arrays and objects (wire.json.MAX_DEPTH)"

#: Every byte but the four brackets, for ``bytes.translate`` to delete.
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
_STEP: Final = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def exceeds_depth(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text ``text`` nests arrays and objects deeper than
    ``limit``, brackets inside strings not counted.

    Iterative and linear, in C string operations: for a text with at most
    ``limit`` opening brackets, two counts. Otherwise escaped backslashes
    and then escaped quotes are dropped (a run of backslashes pairs up from
    its left, as inside a JSON string), so every quote left opens or closes
    a string and the pieces between them alternate outside and inside; an
    unterminated string runs to the end. Outside strings a JSON text is
    ASCII, so the rest is scanned as bytes. A text that is not JSON gets an
    answer too (the decoder refuses that text whatever it is).
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    if "\\" in text:
        text = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(text.split('"')[::2])
    brackets = outside.encode("ascii", "ignore").translate(None, _NOT_BRACKETS)
    # The deepest point is the largest running sum of +1 per opening and
    # -1 per closing bracket.
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


# --------------------------------------------------------------------------- checks


_SCALARS: Final = frozenset({str, bool, int, type(None)})


def is_json(value: object) -> bool:
    """Whether ``value`` is a JSON value with only finite numbers, nested at
    most :data:`MAX_DEPTH` deep.

    Without recursion: containers wait on a list with their depth, so any
    depth (a cycle included, which is infinitely deep) gets an answer.
    """
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is float:
        return math.isfinite(value)  # type: ignore[arg-type]
    pending: list[tuple[Any, int]] = [(value, 0)]
    push, pop = pending.append, pending.pop
    while pending:
        item, depth = pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            children = item.values()
        elif kind is list or kind is tuple:
            children = item
        else:
            return False
        depth += 1
        if depth > MAX_DEPTH:
            return False
        for child in children:
            kind = type(child)
            if kind in _SCALARS:
                continue
            if kind is float:
                if not math.isfinite(child):
                    return False
                continue
            push((child, depth))
    return True


def is_count(value: object) -> bool:
    """Whether ``value`` is a count: an integer (not a bool), 0 ≤ n ≤ 2**53 − 1."""
    return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER  # type: ignore[operator]


# --------------------------------------------------------------------------- writing

_encoder = _json.JSONEncoder(
    ensure_ascii=False,
    check_circular=False,
    allow_nan=False,
    separators=(",", ":"),
)

# Cheap scans that find every place the stdlib's text could differ from
# JavaScript's: a lone surrogate, or a number token that is a float (its
# exponent or trailing ".0") or an integer too long to be exact in a double.
# A token outside strings follows one of ":,[" (or is the whole text, which
# dumps() checks apart); the same run inside a string only sends the text
# down the exact (slower) path below.
_SUSPECT_NUMBER = re.compile(r"[:,\[]-?[0-9]+(?:[.eE]|[0-9]{15})")
# A cheaper scan first (the regex costs ~100 machine instructions a
# character, a quarter of what the daemon spends on a frame): with every
# digit written "0", ".eE" written "." and every other byte " ", a text the
# regex matches holds "0." (a digit then [.eE]) or sixteen "0"s (a digit
# then fifteen more). Without either, the regex cannot match; with one
# (a sentence's "3." will do), the regex decides, as before.
_NUMBER_MARKS: Final = bytes(
    ord("0") if b in b"0123456789" else ord(".") if b in b".eE" else ord(" ") for b in range(256)
)
_LONG_DIGITS: Final = b"0" * 16
# The exact path: strings are matched (and kept) so numbers inside them are
# never touched; numbers outside strings are rewritten.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?', re.DOTALL)
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def js_number(value: int | float) -> str:
    """``String(value)`` for a finite number, as JavaScript writes it.

    Python's ``repr`` already gives the shortest digits that round-trip, the
    same digits ECMAScript's Number::toString picks; only the layout differs.
    """
    if type(value) is int and -(2**53) <= value <= 2**53:
        return str(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not a finite number")
    if number == 0:
        return "0"  # -0 too: String(-0) is "0"
    sign = "-" if number < 0 else ""
    mantissa, _, exponent = repr(abs(number)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    # As in the spec: value = 0.DIGITS × 10**point, DIGITS without leading or
    # trailing zeros.
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    e = point - 1
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{head}e{'+' if e >= 0 else '-'}{abs(e)}"


def _retoken(match: re.Match[str]) -> str:
    token = match.group()
    if token[0] == '"':
        return token
    if token.lstrip("-").isdigit() and len(token.lstrip("-")) < 16:
        return token
    return js_number(_number(token))


class Encoded(dict):  # type: ignore[type-arg]
    """A JSON object whose :func:`dumps` text someone keeps already (the
    board's rows, ``router.board.kept``): ``dumps`` takes the text from
    ``make`` (called once, on first use) instead of encoding the object.
    It is a plain ``dict`` to everyone else; whoever makes one answers for
    the text being the object's."""

    def __init__(self, value: dict, make: Any) -> None:
        super().__init__(value)
        self._make = make
        self._text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self._make()
        return self._text


def dumps(value: JsonValue) -> str:
    """``JSON.stringify(value)`` for a JSON value.

    Raises ``ValueError`` for a non-finite number or a value nested deeper
    than :data:`MAX_DEPTH` (what :func:`loads` would refuse), and
    ``TypeError`` for a value that is not JSON at all.
    """
    if type(value) is Encoded:
        return value.text
    try:
        text = _encoder.encode(value)
    except RecursionError:
        raise ValueError(_TOO_DEEP) from None
    if exceeds_depth(text):
        raise ValueError(_TOO_DEEP)
    surrogates = not text.isascii() and _SURROGATE.search(text) is not None
    if not surrogates and text[0] not in "-0123456789":
        # Without lone surrogates the text encodes; bytes above 127 are " ".
        marks = text.encode().translate(_NUMBER_MARKS)
        if (b"0." not in marks and marks.find(_LONG_DIGITS) < 0) or _SUSPECT_NUMBER.search(text) is None:
            return text
    if surrogates:
        # Outside strings everything is ASCII, so every lone surrogate is
        # inside one; JSON.stringify escapes them (well-formed stringify).
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return _TOKENS.sub(_retoken, text)


def js_length(text: str) -> int:
    """``text.length`` in JavaScript: UTF-16 code units."""
    length = len(text)
    if text.isascii():
        return length
    return length + sum(1 for ch in text if ord(ch) > 0xFFFF)


def json_length(value: JsonValue) -> int:
    """``JSON.stringify(value).length``."""
    return js_length(dumps(value))
