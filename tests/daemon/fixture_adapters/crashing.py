"""A module that raises while it is imported."""

raise RuntimeError("this adapter module is broken")
