"""Where the router's settings and data live by default, from the
environment alone (stdlib only, so a command finds them without loading
the plug-in layer)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

__all__ = ["default_data_dir", "default_settings_dir"]


def default_settings_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$ROUTER_SETTINGS_DIR``, else ``$XDG_CONFIG_HOME/router``, else
    ``~/.config/router``."""
    env = os.environ if env is None else env
    if env.get("ROUTER_SETTINGS_DIR"):
        return Path(env["ROUTER_SETTINGS_DIR"])
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]) / "router"
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".config" / "router"


def default_data_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where turn records (``usage.jsonl``) live: ``$ROUTER_DATA_DIR``, else
    ``$XDG_DATA_HOME/router``, else ``~/.local/share/router``."""
    env = os.environ if env is None else env
    if env.get("ROUTER_DATA_DIR"):
        return Path(env["ROUTER_DATA_DIR"])
    if env.get("XDG_DATA_HOME"):
        return Path(env["XDG_DATA_HOME"]) / "router"
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".local" / "share" / "router"
