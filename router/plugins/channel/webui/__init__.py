"""channel ``webui``: the web page's session operations.

Carries ``list``, ``send`` and ``read`` from the page's HTTP routes to the
core's caller and answers what the core answered, unchanged. Switched off,
the page's routes answer 503 with ``channel-off`` and the recovery command.
"""

from router.plugins.channels import pass_through

INTERFACE_VERSION = 1


async def dispatch(request, core):
    return await pass_through("webui", request, core)
