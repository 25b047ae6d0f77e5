"""Adapters: the agent-specific part of the daemon (see ``router.container.adapter``)."""
