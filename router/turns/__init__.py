"""The user-turn router, its session registry and the live view.

- :mod:`router.turns.core`: the sans-IO decisions (delivery states, what to
  do on each answer);
- :mod:`router.turns.delivery_log`: the deliveries' durable record (SQLite);
- :mod:`router.turns.registry`: the open sessions, their kind, target, nursery, tasks;
- :mod:`router.turns.targets`: each session kind behind one protocol (a
  Claude Code session's mod link, a container session's host);
- :mod:`router.turns.live`: the live view (mod events → ``ContainerMessage``);
- :mod:`router.turns.brackets`, :mod:`router.turns.session_brackets`: each
  session's turn brackets (sans-IO, then on Trio);
- :mod:`router.turns.router`: ``TurnRouter``, the Trio layer;
- :mod:`router.turns.cli`: ``router send``.

Nothing is imported here, so ``router send`` (a plain HTTP client) starts
without loading the server side; import the modules themselves.
"""
