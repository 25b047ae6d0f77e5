"""search-source ``harness-builtin``: the harness searches for itself.

Switched on, it tells the broker to serve no search: a harness with its own
web tools (Claude Code's WebSearch and WebFetch) searches without the
router. ``search`` always refuses, naming how to switch a real source on.
"""

from router.errors import Refusal

INTERFACE_VERSION = 1


async def search(options, query, deps):
    raise Refusal(
        "harness-searches",
        "the router serves no web search: the harness searches for itself "
        '(search-source is "harness-builtin"); to serve search here, switch on '
        '"searxng-url" with `router plugins set` and set options.search-source.searxng-url.url',
    )
