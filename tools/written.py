"""Files in folders that sandboxed code could write, as trusted code reads and writes them.

A process that ran candidate code may leave, in place of the file it was asked to write, a link (to the token, to
/dev/zero), a FIFO (a read that never returns) or a file of any size; in place of a file trusted code is about to
write, a link to the file it means to overwrite. Trusted code reads such a file only as a regular file, opened
without following a link and without blocking, and only up to a limit; it writes only a file it creates anew.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_written(path: Path, limit: int, *, tail: bool = False) -> bytes | None:
    """The bytes of the regular file at `path` (at most `limit`: its end where `tail`, else None when it is
    larger), or None when it is missing, a link, or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size > limit and not tail:
            return None
        start = max(0, st.st_size - limit)
        chunks = []
        got = 0
        while got < limit:
            chunk = os.pread(fd, limit - got, start + got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_new(path: Path, text: str) -> None:
    """Write `text` into a file created anew at `path`: whatever is there (a link, a file) is removed first, and
    the create refuses to follow one put back in between."""
    if os.path.lexists(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def copy_written(src: Path, dst: Path, *, limit_bytes: int, max_files: int, suffix: str = "") -> None:
    """Copy the regular files under `src` (names ending in `suffix`) to the same places under `dst`, at most
    `max_files` of them and `limit_bytes` in all: links to folders are not entered, links, FIFOs and devices not
    read (the folder is what candidate code left: a link to /usr or /dev/zero, any number of files)."""
    left, files_left = limit_bytes, max_files
    for folder, dirs, files in os.walk(src):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not (here / d).is_symlink())
        out = dst / here.relative_to(src)
        out.mkdir(parents=True, exist_ok=True)
        for name in sorted(files):
            if files_left <= 0:
                return
            if not name.endswith(suffix):
                continue
            data = read_written(here / name, left)
            if data is None:
                continue
            files_left -= 1
            left -= len(data)
            (out / name).write_bytes(data)
