"""Where a run's report lives: one folder per run, named after it, never shared with another run.

A report is something a user keeps, so writing one must never destroy another run's: every report
goes to a folder of its own run (`reports/RUN/`), and a folder remembers whose it is (a marker file,
or for a folder written before the marker existed, the run named in its report.md). Writing the report
of the run that owns a folder refreshes it; writing another run's report there is refused.

Run ids are chosen by users (`--run-id`), so they may hold characters a folder name cannot (`/`,
a leading dot, spaces). Such an id gets a cleaned name plus a short hash of the id itself, so two
different ids never share a folder by cleaning to the same name.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

MARKER = ".marathon-run"  # holds the run id whose report the folder is
REPORT = "report.md"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_HEADING = re.compile(r"^# Run (.+?): \S+ at shape ")
MAX_NAME = 100


class FolderTaken(FileExistsError):
    """The folder holds another run's report."""


def folder_name(run_id: str) -> str:
    """A file-system-safe folder name for a run: the id itself when it is already safe."""
    clean = _UNSAFE.sub("_", run_id).lstrip(".")[:MAX_NAME]
    if clean == run_id and clean:
        return clean
    digest = hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:8]
    return f"{clean or 'run'}-{digest}"


def run_folder(out: Path, run_id: str) -> Path:
    """The run's report folder under `out`: `out` itself when it is named after the run (the default,
    `$MARATHON_HOME/reports/RUN`, or an explicit `--out reports/RUN`), else `out/RUN`, so that a folder
    given for reports in general (`--out reports`) gathers one folder per run; and `out` itself when it
    already holds this run's report (written there before), which is then refreshed. FolderTaken when
    `out` is another run's report folder: a report is never tucked inside another run's."""
    if out.name == folder_name(run_id):
        return out
    held_by = owner(out)
    if held_by == run_id:
        return out
    if held_by is not None:
        raise FolderTaken(_taken(out, held_by))
    return out / folder_name(run_id)


def owner(folder: Path) -> str | None:
    """The run whose report the folder holds, or None (a new folder, or one that holds no report)."""
    marker = folder / MARKER
    if marker.is_file():
        return marker.read_text(encoding="utf-8").rstrip("\n") or None
    report = folder / REPORT
    if report.is_file():
        with open(report, encoding="utf-8", errors="replace") as fh:
            found = _HEADING.match(fh.readline())
        return found.group(1) if found else None
    return None


def _taken(folder: Path, held_by: str) -> str:
    return (f"{folder} holds the report of run {held_by!r}, and a report never replaces another run's: "
            "choose another folder")


def claim(folder: Path, run_id: str) -> None:
    """Make `folder` the report folder of `run_id`; FolderTaken if it is another run's."""
    held_by = owner(folder)
    if held_by not in (None, run_id):
        raise FolderTaken(_taken(folder, held_by))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text(run_id + "\n", encoding="utf-8")
