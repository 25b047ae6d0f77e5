"""The cluster tests' fixtures: a private PostgreSQL (``tests/cluster/pg.py``)."""

from tests.cluster.pg import pg_url, postgres  # noqa: F401  (fixtures)
