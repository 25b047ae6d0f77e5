"""Adapters: the agent-specific part of the daemon (see ``router.daemon.adapter``)."""
