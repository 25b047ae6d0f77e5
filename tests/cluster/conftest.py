"""The cluster tests' fixtures: a private PostgreSQL per test session
(``tests/support/postgres.py``), a fresh database per test."""

import pytest

from tests.support.postgres import postgres, postgres_url  # noqa: F401  (fixtures)


@pytest.fixture
def pg_url(postgres_url: str) -> str:  # noqa: F811
    return postgres_url
