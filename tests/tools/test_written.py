"""Trusted code reads what sandboxed code wrote as a regular file only, without following links or blocking."""

from __future__ import annotations

import os
from pathlib import Path

from tools.written import read_written


def test_a_regular_file_is_read_up_to_its_limit(tmp_path: Path) -> None:
    f = tmp_path / "rc"
    f.write_bytes(b"0\n")
    assert read_written(f, 16) == b"0\n"
    f.write_bytes(b"x" * 100)
    assert read_written(f, 16) is None
    assert read_written(f, 16, tail=True) == b"x" * 16
    assert read_written(tmp_path / "missing", 16) is None


def test_a_link_a_fifo_and_a_device_are_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_bytes(b"secret")
    (tmp_path / "link").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo")  # a blocking read would never return: no writer
    (tmp_path / "zero").symlink_to("/dev/zero")
    for name in ("link", "fifo", "zero"):
        assert read_written(tmp_path / name, 1 << 20) is None, name
