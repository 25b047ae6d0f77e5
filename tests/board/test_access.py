"""The access token (``router.board.access``): made once, 0600, reused;
refused when it is not private; a Bearer header checked, whatever it holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.board.access import check_bearer, load_or_create_token, read_token, token_path
from router.errors import Refusal


def test_made_once_0600_and_reused(tmp_path: Path) -> None:
    settings = tmp_path / "settings"  # not there yet: made
    token = load_or_create_token(settings)
    path = token_path(settings)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert len(token) == 43 and path.read_text() == token + "\n"
    assert load_or_create_token(settings) == token
    assert [p.name for p in settings.iterdir()] == ["api-token"]  # no temporary left


def test_made_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        load_or_create_token(tmp_path)
    finally:
        os.umask(old)
    assert os.stat(token_path(tmp_path)).st_mode & 0o777 == 0o600


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o700, 0o400])
def test_a_file_of_another_mode_is_refused(tmp_path: Path, mode: int) -> None:
    token = load_or_create_token(tmp_path)
    path = token_path(tmp_path)
    path.chmod(mode)
    with pytest.raises(Refusal) as caught:
        load_or_create_token(tmp_path)
    assert caught.value.code == "token-file-unsafe"
    assert f"{mode:04o}" in caught.value.message and "0600" in caught.value.message and str(path) in caught.value.message
    assert path.read_text().strip() == token  # left as it was


def test_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("a" * 43)
    target.chmod(0o600)
    token_path(tmp_path).symlink_to(target)
    with pytest.raises(Refusal) as caught:
        load_or_create_token(tmp_path)
    assert caught.value.code == "token-file-unsafe" and "symbolic link" in caught.value.message


@pytest.mark.parametrize("content", [b"", b"short", b"has spaces in it, many of them", b"\xff" * 40])
def test_a_file_that_holds_no_token_is_refused(tmp_path: Path, content: bytes) -> None:
    path = token_path(tmp_path)
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(Refusal) as caught:
        read_token(path)
    assert caught.value.code == "token-file-bad"


def test_a_missing_file_when_only_reading(tmp_path: Path) -> None:
    with pytest.raises(Refusal) as caught:
        read_token(token_path(tmp_path))
    assert caught.value.code == "no-token-file"


TOKEN = "x" * 43


@pytest.mark.parametrize("headers,code", [
    ({}, "no-token"),
    ({"authorization": ""}, "no-token"),
    ({"authorization": "Bearer"}, "no-token"),
    ({"authorization": "Bearer   "}, "no-token"),
    ({"authorization": f"Basic {TOKEN}"}, "no-token"),
    ({"authorization": "Bearer y" + TOKEN[1:]}, "bad-token"),
    ({"authorization": f"Bearer {TOKEN}x"}, "bad-token"),
    ({"authorization": f"Bearer {TOKEN}"}, None),
    ({"authorization": f"bearer {TOKEN}"}, None),
])
def test_the_bearer_header(headers: dict[str, str], code: str | None) -> None:
    refused = check_bearer(headers, TOKEN)
    assert (None if refused is None else refused.code) == code


@given(st.text())
def test_any_header_value_is_a_refusal_or_the_token(value: str) -> None:
    refused = check_bearer({"authorization": value}, TOKEN)
    assert refused is None or refused.code in ("no-token", "bad-token")
    assert (refused is None) == (value.strip().partition(" ")[0].lower() == "bearer"
                                 and value.strip().partition(" ")[2].strip() == TOKEN)


def test_a_new_token_never_starts_like_an_option() -> None:
    # `router ... --token TOKEN`: argparse takes a value starting with "-"
    # for an option. token_urlsafe starts with "-" or "_" 1 time in 32.
    from router.board.access import new_token

    tokens = [new_token() for _ in range(2000)]
    assert all(token[0].isalnum() for token in tokens)
    assert len(set(tokens)) == len(tokens)
