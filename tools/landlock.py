"""Landlock, the Linux sandbox any process may put itself in (kernel 5.13+), through its three system calls.

A candidate process restricts itself before loading candidate code: it may read and execute anything (torch,
Triton, the CUDA driver, its Python, wherever they are installed), write only inside its own directory and to
the few device files CUDA needs, open no TCP connection or port, signal no process outside its own sandbox,
and (Landlock's rule since its first version) ptrace none, so it can neither read the judge's memory nor kill
it. No uid change is needed, so this works whoever runs the server. Restrictions are one-way: nothing the
process does afterwards lifts them, and its children inherit them.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Iterable

_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_CAP_LAST = 63
_RULE_PATH_BENEATH = 1
_VERSION_FLAG = 1

# Filesystem rights, by the ABI version that introduced them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, 3
_FS_V1 = (1 << 13) - 1
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

READ = EXECUTE | READ_FILE | READ_DIR
WRITE_TREE = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SYM | MAKE_SOCK | MAKE_FIFO
DEVICE = READ_FILE | WRITE_FILE

_libc = ctypes.CDLL(None, use_errno=True)


class LandlockError(OSError):
    pass


def abi_version() -> int:
    """The kernel's Landlock ABI (0: none here)."""
    calls = _SYSCALLS.get(platform.machine())
    if calls is None or platform.system() != "Linux":
        return 0
    version = _libc.syscall(calls[0], None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION_FLAG))
    return max(0, int(version))


def _fs_rights(abi: int) -> int:
    rights = _FS_V1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


def restrict(read: Iterable[str], write: Iterable[str], devices: Iterable[str]) -> dict[str, object]:
    """Restrict this process: returns what was applied. Raises LandlockError where Landlock is missing."""
    abi = abi_version()
    if abi < 1:
        raise LandlockError("Landlock is not available on this kernel")
    create, add_rule, restrict_self = _SYSCALLS[platform.machine()]
    handled_fs = _fs_rights(abi)
    fields = [handled_fs]
    if abi >= 4:
        fields.append(NET_BIND_TCP | NET_CONNECT_TCP)  # handled, with no rule: no TCP at all
    if abi >= 6:
        fields.append(SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    attr = struct.pack(f"={len(fields)}Q", *fields)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _libc.syscall(create, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise LandlockError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        granted: list[tuple[str, int]] = []
        for paths, rights in ((read, READ), (write, handled_fs & (READ | WRITE_TREE | TRUNCATE | REFER)),
                              (devices, DEVICE)):
            for path in paths:
                if _add_path(add_rule, ruleset, path, rights & handled_fs):
                    granted.append((path, rights))
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise LandlockError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if _libc.syscall(restrict_self, ruleset, ctypes.c_uint32(0)) != 0:
            raise LandlockError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return {"landlock_abi": abi, "tcp": "refused" if abi >= 4 else "allowed (Landlock ABI < 4)",
            "signals": "own sandbox only" if abi >= 6 else "unrestricted (Landlock ABI < 6)",
            "writable": [p for p, r in granted if r & WRITE_FILE and r != DEVICE]}


def _add_path(add_rule: int, ruleset: int, path: str, rights: int) -> bool:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not os.path.isdir(path):
            rights &= EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE  # rights a file (not a directory) can hold
        attr = struct.pack("=Qi", rights, fd)
        buf = ctypes.create_string_buffer(attr, len(attr))
        if _libc.syscall(add_rule, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), buf, ctypes.c_uint32(0)) != 0:
            raise LandlockError(ctypes.get_errno(), f"landlock_add_rule({path}): {os.strerror(ctypes.get_errno())}")
        return True
    finally:
        os.close(fd)


def drop_capabilities() -> None:
    """Where this process is root: empty its capability sets, so uid 0 keeps no power beyond its files
    (which Landlock already fences). Harmless for other users."""
    for cap in range(_CAP_LAST + 1):
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # two {effective, permitted, inheritable} u32 triples, all zero
    hbuf, dbuf = ctypes.create_string_buffer(header, 8), ctypes.create_string_buffer(data, 24)
    capset = {"x86_64": 126, "aarch64": 91}.get(platform.machine())
    if capset is not None:
        _libc.syscall(capset, hbuf, dbuf)
