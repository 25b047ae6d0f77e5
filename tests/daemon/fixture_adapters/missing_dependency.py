"""A module that exists but imports one that does not."""

import surely_not_installed_anywhere_xyz  # noqa: F401

adapter = None
