"""Adapters for `router daemon --adapter MODULE:ATTR` tests: good, broken
and not adapters at all."""
