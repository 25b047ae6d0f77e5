"""Attributes of every shape ``load_adapter`` meets."""

from router.daemon.adapters.echo import EchoAdapter

not_an_adapter = 42


def make_adapter() -> EchoAdapter:
    return EchoAdapter()


class BadInfo:
    info = {"id": "x", "version": "1", "capabilities": []}

    async def open(self, context):  # pragma: no cover
        raise AssertionError


bad_info = BadInfo()
