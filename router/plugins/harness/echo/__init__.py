"""harness ``echo``: the in-process daemon with the echo adapter.

The session runs in the router's own process: an in-process container daemon
whose adapter echoes each prompt (``router.daemon``). It needs nothing on
the machine, spends no account, and is the default route on a first start.
"""

INTERFACE_VERSION = 1

#: The echo adapter's version, as the reference's echo adapter reports it
#: (``echo``, version ``1``: ``router.daemon.adapters.echo``'s ``AdapterInfo``).
ADAPTER_VERSION = "1"


def levels(options):
    # The echo adapter does no thinking: its one level is "off".
    return ["off"]


def counts_account(options):
    return False


def reach(context):
    return {"via": "in-process", "adapter": "echo", "model": context["route"]["model"]}


def env(context):
    return {}


async def preflight(context):
    return None


async def version(context):
    return f"echo {ADAPTER_VERSION}"
