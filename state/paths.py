"""Where the event log lives.

$MARATHON_HOME wins (tests and side-by-side installs set it); otherwise the XDG state directory,
because the log is state that should survive reboots but is not configuration or cache.
The directory is private (0700): tool arguments and model turns may hold things worth keeping private.
"""

from __future__ import annotations

import os
from pathlib import Path

APP = "kernel-marathon"
DB_NAME = "marathon.db"


def state_dir() -> Path:
    """$MARATHON_HOME, else $XDG_STATE_HOME/kernel-marathon, else ~/.local/state/kernel-marathon.

    Created on demand with mode 0700.
    """
    home = os.environ.get("MARATHON_HOME")
    if home:
        path = Path(home).expanduser()
    else:
        xdg = os.environ.get("XDG_STATE_HOME")
        # The XDG spec says relative paths are invalid and must be ignored.
        base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state"
        path = base / APP
    ensure_private_dir(path)
    return path


def default_db_path() -> Path:
    """state_dir()/marathon.db."""
    return state_dir() / DB_NAME


def ensure_private_dir(path: Path) -> None:
    """Create `path` (and parents) if missing; a directory this call creates gets mode 0700."""
    if path.is_dir():
        return
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
