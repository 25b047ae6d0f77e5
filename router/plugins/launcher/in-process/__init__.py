"""launcher ``in-process``: the embedded default, the in-process echo daemon.

``router serve`` runs one daemon in its own process (``router.daemon`` with
the echo adapter that reports usage) and hands its endpoint to this module
as options: ``{"url": "ws://127.0.0.1:PORT", "token": "...", "runtime":
"in-process-..."}``. Every session shares that daemon, so ``start`` answers
the shared endpoint (with its token and runtime id, which replace the fresh
ones of the context), ``wait`` never returns (the daemon lives as long as
the router), and ``stop`` stops nothing: the session is only no longer
dialled. Only the echo harness runs here; any other is refused
``harness-unsupported`` (run it with the ``process`` or ``docker``
launcher).
"""

import trio

INTERFACE_VERSION = 1

#: The one harness the in-process daemon runs (its adapter).
HARNESS = "echo"
def _container(options):
    """The shared daemon's id: one per run of the router (its runtime id),
    so a daemon an earlier run recorded is never taken for this one."""
    runtime = options.get("runtime")
    return f"in-process-{runtime}" if type(runtime) is str else "in-process"


def _options(context):
    options = context.get("options")
    return options if type(options) is dict else {}


async def start(context):
    options = _options(context)
    harness = context.get("harness") or HARNESS
    if harness != HARNESS:
        return {
            "code": "harness-unsupported",
            "message": f"the in-process daemon runs the {HARNESS} harness only, not {harness!r}; "
            "start the router with `router serve --launcher process` (or docker) to run it",
        }
    if type(options.get("url")) is not str or type(options.get("token")) is not str:
        return {
            "code": "start-failed",
            "message": "the in-process daemon is not running (the router starts it and names it in "
            "this module's options)",
        }
    await trio.lowlevel.checkpoint()
    answer = {"url": options["url"], "token": options["token"], "container": _container(options), "state": "running"}
    if type(options.get("runtime")) is str:
        answer["runtime"] = options["runtime"]
    return answer


async def wait(context, container):
    # The shared daemon runs as long as the router: nothing to wait for.
    await trio.sleep_forever()


async def inspect(context, container):
    await trio.lowlevel.checkpoint()
    return {"state": "running" if container == _container(_options(context)) else "missing"}


async def stop(context, container):
    await trio.lowlevel.checkpoint()


async def remove_workspace(context):
    await trio.lowlevel.checkpoint()
