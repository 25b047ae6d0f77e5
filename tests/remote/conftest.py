"""Fixtures for the reach tests: the PostgreSQL ones (tests/support/postgres.py)."""

from tests.support.postgres import postgres, postgres_url, store_url  # noqa: F401  (fixtures)
