"""The pairing book (router.remote.pairing): codes, expiry, lockout, as a
sans-IO machine; hypothesis drives it with any sequence of inputs and
checks its invariants against a model."""

from __future__ import annotations

import itertools

from hypothesis import given, settings, strategies as st

from router.errors import Refusal
from router.remote.pairing import CODE_TTL, LOCKOUT, MAX_WRONG, Issued, PairingBook, Redeemed


def test_a_code_pairs_once() -> None:
    book = PairingBook()
    issued = book.issue(0.0)
    assert isinstance(issued, Issued) and len(issued.code) >= 22 and issued.expires_at == CODE_TTL
    assert isinstance(book.redeem(issued.code, 1.0), Redeemed)
    again = book.redeem(issued.code, 2.0)
    assert isinstance(again, Refusal) and again.code == "pairing-code-used"


def test_a_code_expires() -> None:
    book = PairingBook()
    issued = book.issue(0.0)
    assert isinstance(issued, Issued)
    late = book.redeem(issued.code, CODE_TTL)
    assert isinstance(late, Refusal) and late.code == "pairing-code-expired"


def test_wrong_codes_lock_pairing_even_for_the_right_code() -> None:
    book = PairingBook()
    issued = book.issue(0.0)
    assert isinstance(issued, Issued)
    for n in range(MAX_WRONG):
        wrong = book.redeem(f"guess-{n}", 1.0 + n)
        assert isinstance(wrong, Refusal) and wrong.code == "bad-pairing-code"
    locked = book.redeem(issued.code, 10.0)
    assert isinstance(locked, Refusal) and locked.code == "pairing-locked" and locked.data["retryAfter"] > 0
    refused_issue = book.issue(10.0)
    assert isinstance(refused_issue, Refusal) and refused_issue.code == "pairing-locked"
    after = book.issue(MAX_WRONG + LOCKOUT + 1.0)
    assert isinstance(after, Issued)
    assert isinstance(book.redeem(after.code, MAX_WRONG + LOCKOUT + 2.0), Redeemed)


def test_a_used_or_expired_code_is_no_wrong_try() -> None:
    book = PairingBook()
    issued = book.issue(0.0)
    assert isinstance(issued, Issued)
    assert isinstance(book.redeem(issued.code, 1.0), Redeemed)
    for n in range(MAX_WRONG * 2):
        assert book.redeem(issued.code, 2.0 + n).code == "pairing-code-used"  # type: ignore[union-attr]
    assert isinstance(book.issue(50.0), Issued)  # not locked
    assert book.statistics(50.0).wrong == 0


# ---------------------------------------------------------------------- hypothesis

_steps = st.lists(
    st.tuples(
        st.sampled_from(["issue", "redeem-issued", "redeem-guess", "wait"]),
        st.integers(min_value=0, max_value=20),
        st.floats(min_value=0.0, max_value=CODE_TTL * 1.5, allow_nan=False),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(_steps)
def test_invariants(steps: list[tuple[str, int, float]]) -> None:
    """A code redeems at most once; never at or after its expiry; never
    while locked; a code never issued never redeems; memory stays bounded."""
    counter = itertools.count()
    book = PairingBook(make_code=lambda: f"code-{next(counter):06d}-xxxxxxxxxxxx")
    now = 0.0
    issued: list[Issued] = []
    redeemed: set[str] = set()
    locked_until = -1.0
    for kind, pick, dt in steps:
        if kind == "wait":
            now += dt
            continue
        now += 0.001
        if kind == "issue":
            got = book.issue(now)
            if isinstance(got, Issued):
                assert now >= locked_until
                issued.append(got)
            else:
                assert got.code == "pairing-locked"
            continue
        if kind == "redeem-issued" and issued:
            target = issued[pick % len(issued)]
            code, expires = target.code, target.expires_at
        else:
            code, expires = f"never-{pick}", None
        result = book.redeem(code, now)
        if isinstance(result, Redeemed):
            assert expires is not None and now < expires, "only an issued code, before its expiry"
            assert code not in redeemed, "at most once"
            assert now >= locked_until, "never while locked"
            redeemed.add(code)
        else:
            assert result.code in ("bad-pairing-code", "pairing-code-used", "pairing-code-expired", "pairing-locked")
            if result.code == "pairing-locked":
                locked_until = max(locked_until, now + result.data["retryAfter"] - 1)
        assert book.statistics(now).remembered <= 256 + 1
