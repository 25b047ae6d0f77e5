"""Every session of every router of this user on this machine, as one board.

``state`` derives a session's state from what its router knows; ``local``
names and places each router's private Unix socket (the same API the TCP
port serves, for this user alone, served by :mod:`router.api.server`);
``client`` finds every such router and asks them; ``cli`` is ``router
sessions``. Nothing is imported here, so that the user-turn
router can read ``state`` without loading the API.
"""
