"""The judge reads what a candidate process sends as data: framed, bounded, and checked against what it expects."""

from __future__ import annotations

import os
import socket
import struct

import pytest
import torch

from tools import wire


@pytest.fixture()
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield a, b
    a.close()
    b.close()


def test_header_and_tensors_round_trip(pair) -> None:
    a, b = pair
    x = torch.randn(3, 5, dtype=torch.float32)
    specs, fds = wire.pack_values([x, None, 3, 2.5, True])
    wire.send(a, {"op": "call", "inputs": specs}, fds)
    for fd in fds:
        os.close(fd)
    msg = wire.recv(b, timeout=5)
    values = wire.unpack_values(msg.header["inputs"], msg.fds, limit_bytes=1 << 20)
    msg.close_fds()
    assert torch.equal(values[0], x) and values[1:] == [None, 3, 2.5, True]


def test_oversized_header_is_refused_before_it_is_read(pair) -> None:
    a, b = pair
    a.sendall(struct.pack("!I", wire.MAX_HEADER_BYTES + 1))
    with pytest.raises(wire.WireError, match="over the"):
        wire.recv(b, timeout=5)


def test_malformed_header_and_non_object(pair) -> None:
    a, b = pair
    a.sendall(struct.pack("!I", 5) + b"{nope")
    with pytest.raises(wire.WireError, match="malformed"):
        wire.recv(b, timeout=5)
    a.sendall(struct.pack("!I", 2) + b"[]")
    with pytest.raises(wire.WireError, match="object"):
        wire.recv(b, timeout=5)


def test_silence_times_out_and_a_closed_peer_is_reported(pair) -> None:
    a, b = pair
    with pytest.raises(wire.WireTimeout):
        wire.recv(b, timeout=0.2)
    a.close()
    with pytest.raises(wire.PeerClosed):
        wire.recv(b, timeout=1)


def test_tensor_reader_trusts_only_its_own_expectations() -> None:
    x = torch.arange(12, dtype=torch.float32)
    fd = wire.tensor_to_fd(x)
    try:
        assert torch.equal(wire.tensor_from_fd(fd, "float32", [3, 4], 1 << 20), x.reshape(3, 4))
        with pytest.raises(wire.WireError, match="holds"):
            wire.tensor_from_fd(fd, "float32", [4, 4], 1 << 20)  # more than the file holds
        with pytest.raises(wire.WireError, match="limit"):
            wire.tensor_from_fd(fd, "float32", [3, 4], 16)
        with pytest.raises(wire.WireError, match="not accepted"):
            wire.tensor_from_fd(fd, "complex64", [3], 1 << 20)
        with pytest.raises(wire.WireError, match="shape"):
            wire.tensor_from_fd(fd, "float32", [-1], 1 << 20)
    finally:
        os.close(fd)
    r, w = os.pipe()
    try:
        with pytest.raises(wire.WireError, match="regular file"):
            wire.tensor_from_fd(r, "float32", [1], 1 << 20)  # a pipe would block the judge
    finally:
        os.close(r)
        os.close(w)


def test_a_later_write_to_the_file_does_not_change_what_was_read() -> None:
    x = torch.ones(8, dtype=torch.float32)
    fd = wire.tensor_to_fd(x)
    try:
        got = wire.tensor_from_fd(fd, "float32", [8], 1 << 20)
        os.pwrite(fd, b"\xff" * 32, 0)
        assert torch.equal(got, x)
    finally:
        os.close(fd)


def test_more_descriptors_than_a_message_carries_are_refused_at_the_sender(pair) -> None:
    a, _ = pair
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(wire.MAX_FDS + 1)]
    try:
        with pytest.raises(wire.WireError, match="at most"):
            wire.send(a, {"op": "fetch"}, fds)
    finally:
        for fd in fds:
            os.close(fd)


def test_a_file_that_shrinks_while_it_is_read_is_refused_not_a_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sender keeps a descriptor of its file and can cut it while the judge reads: a mapped read would take
    SIGBUS (the judge's process dies); a read returns short, and that is a refusal."""
    x = torch.ones(4096, dtype=torch.float32)
    fd = wire.tensor_to_fd(x)
    real_fstat = os.fstat
    try:
        checked = real_fstat(fd)
        os.ftruncate(fd, 100)  # cut after the size check below has seen the whole file
        monkeypatch.setattr(wire.os, "fstat", lambda f: checked if f == fd else real_fstat(f))
        with pytest.raises(wire.WireError, match="ended after 100 of its 16384 bytes"):
            wire.tensor_from_fd(fd, "float32", [4096], 1 << 20)
    finally:
        os.close(fd)


def test_an_answers_descriptors_are_closed_unless_the_judge_takes_them(pair) -> None:
    """A candidate's process can attach descriptors to any answer (64 memfds of 8 MB to each `load`): kept, they
    pinned memory and used up the judge's descriptors profile after profile."""
    from types import SimpleNamespace

    from tools.judge import Session

    a, b = pair
    session = Session(sandbox=None, spawned=SimpleNamespace(sock=a), deadline=1e18)  # type: ignore[arg-type]
    for takes in (False, True):
        fd = wire.tensor_to_fd(torch.ones(8))
        wire.send(b, {"ok": True}, [fd])
        os.close(fd)
        before = len(os.listdir("/proc/self/fd"))
        answer = session.request({"op": "load"}, timeout=5.0, takes_fds=takes)
        assert len(answer.fds) == (1 if takes else 0)
        assert len(os.listdir("/proc/self/fd")) == before + (1 if takes else 0)
        wire.recv(b, 5.0)  # the request itself
        answer.close_fds()


def test_an_integer_no_float_can_hold_is_refused(pair) -> None:
    """10**400 in a timing sample made the judge's float() raise OverflowError: a crash reported as the tools'."""
    a, b = pair
    body = b'{"ok": true, "us": [' + b"1" + b"0" * 400 + b"]}"
    a.sendall(struct.pack("!I", len(body)) + body)
    with pytest.raises(wire.WireError, match="digits"):
        wire.recv(b, 5.0)
    wire.send(a, {"ok": True, "us": [12345678901234567890, -3]})
    assert wire.recv(b, 5.0).header["us"] == [12345678901234567890, -3]


def test_a_candidate_cannot_claim_the_tools_failed() -> None:
    """internal_error reads as 'the tools broke, retry': the candidate's process saying so is a protocol error."""
    from tools.judge import Refusal, _raise_error

    with pytest.raises(Refusal) as caught:
        _raise_error({"error": {"error_class": "internal_error", "message": "the harness lost its stash"}})
    assert caught.value.error_class == "protocol_error"
