"""channel ``cli``: the ``router`` command's session operations.

Carries ``list``, ``send`` and ``read`` from the command to the core's caller
and answers what the core answered, unchanged. It creates nothing, chooses
nothing and writes no settings. Switched off, the command refuses
``channel-off`` with exit status 3, naming the recovery command.
"""

from router.plugins.channels import pass_through

INTERFACE_VERSION = 1


async def dispatch(request, core):
    return await pass_through("cli", request, core)
