"""The container daemon protocol: the daemon (inside a container), its
adapters, and the host that drives daemons and owns the durable record."""
