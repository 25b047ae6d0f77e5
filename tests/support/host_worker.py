"""A host in a process of its own, for the fault campaign to kill.

    python -m tests.support.host_worker --daemon URL --token T --store PATH --ops N

Submits the operations ``w-1`` … ``w-N`` of the root session at once (the
same keys every run, so a restart resubmits the same operations), waits for
each in order and prints its result as one JSON line; exits 0 when all are
settled. Killed at any instant and started again, it must lose nothing and
run nothing twice: the campaign checks that from the store.
"""

from __future__ import annotations

import argparse
import json
import sys

import trio

from router.host.host import Host, HostSettings
from router.host.link import DaemonEndpoint
from router.host.store import Store

#: Reconnect quickly (tests/host/conftest.py's FAST): the daemon is local.
FAST = dict(reconnect_base=0.02, reconnect_cap=0.25)


def worker_text(number: int) -> str:
    """Operation ``w-<number>``'s input: quick or slow, so kills land
    between turns and inside them."""
    delay = (0, 0, 40, 150)[number % 4]
    return f"slow {delay} work {number}" if delay else f"work {number}"


async def main(args: argparse.Namespace) -> None:
    with Store(args.store) as store:
        async with trio.open_nursery() as nursery:
            host = Host(store, DaemonEndpoint(args.daemon, args.token), HostSettings(**FAST))  # type: ignore[arg-type]
            await nursery.start(host.run)
            session = host.session()
            ids = [f"w-{n}" for n in range(1, args.ops + 1)]
            for number, operation_id in enumerate(ids, 1):
                await session.submit(worker_text(number), operation_id=operation_id)
            for operation_id in ids:
                result = await session.wait(operation_id)
                print(json.dumps({"id": operation_id, **result.to_json()}), flush=True)
            await host.aclose()
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--ops", type=int, required=True)
    trio.run(main, parser.parse_args())
    sys.exit(0)
