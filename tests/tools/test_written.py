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


def test_a_copy_out_of_a_candidates_folder_takes_regular_files_within_its_limits(tmp_path: Path) -> None:
    from tools.written import copy_written

    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "sub").mkdir(parents=True)
    (src / "a.cubin").write_bytes(b"a" * 10)
    (src / "sub" / "b.cubin").write_bytes(b"b" * 10)
    (src / "c.txt").write_bytes(b"c")
    (src / "usr").symlink_to("/usr")  # a folder link: not entered
    (src / "zero.cubin").symlink_to("/dev/zero")
    os.mkfifo(src / "fifo.cubin")
    copy_written(src, dst, limit_bytes=1 << 20, max_files=10, suffix=".cubin")
    copied = sorted(str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file())
    assert copied == ["a.cubin", "sub/b.cubin"]
    few = tmp_path / "few"
    copy_written(src, few, limit_bytes=1 << 20, max_files=1)
    assert len([p for p in few.rglob("*") if p.is_file()]) == 1
    small = tmp_path / "small"
    copy_written(src, small, limit_bytes=15, max_files=10, suffix=".cubin")
    assert sum(p.stat().st_size for p in small.rglob("*") if p.is_file()) <= 15
