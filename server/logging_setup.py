"""Server logging: to stderr and to state_dir()/logs/server.log, never to stdout.

On stdio, stdout is the protocol: one stray line corrupts the client's stream. So every handler
here writes to stderr or the file, and `serve` also moves file descriptor 1 (server.transport).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

from state import state_dir
from state.paths import ensure_private_dir

_TAG = "_marathon_handler"
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(process)d]: %(message)s"


def log_path() -> Path:
    return state_dir() / "logs" / "server.log"


def configure(level: str = "INFO", path: Path | None = None) -> Path:
    """Send the root logger to stderr and a rotating, private log file; returns the file's path.

    Idempotent: a second call replaces the handlers it added the first time.
    """
    path = path or log_path()
    ensure_private_dir(path.parent)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600))
    root = logging.getLogger()
    for h in [h for h in root.handlers if getattr(h, _TAG, False)]:
        root.removeHandler(h)
        h.close()
    formatter = logging.Formatter(FORMAT)
    to_stderr = logging.StreamHandler(sys.stderr)
    to_file = logging.handlers.RotatingFileHandler(path, maxBytes=20 * 2**20, backupCount=3, encoding="utf-8")
    for h in (to_stderr, to_file):
        h.setFormatter(formatter)
        setattr(h, _TAG, True)
        root.addHandler(h)
    root.setLevel(level.upper())
    # Request-level chatter from the HTTP stack stays out of the log unless asked for.
    for noisy in ("httpx", "httpx2", "httpcore", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    logging.captureWarnings(True)
    return path
