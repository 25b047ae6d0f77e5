"""The HTTP ingress and the live view: Quart-Trio served by Hypercorn on
127.0.0.1 (:mod:`router.api.app` for the routes, :mod:`router.api.server`
for the server, :mod:`router.api.page` for the page at ``/``)."""
