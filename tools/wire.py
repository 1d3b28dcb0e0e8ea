"""The wire between the trusted judge and an untrusted candidate process: framed JSON plus tensors in memfds.

Everything that comes back from a candidate process is data, read with limits and a schema: a message is a
4-byte length, a JSON header of at most `MAX_HEADER_BYTES`, and file descriptors passed beside it
(SCM_RIGHTS). A tensor travels as an anonymous file (memfd) holding its raw bytes; the reader states the dtypes
and shape it accepts and reads (never maps) exactly that many bytes, whatever the file's size.
A reader never blocks past its deadline. Standard library at import; torch only in the tensor helpers.
"""

from __future__ import annotations

import json
import mmap
import os
import select
import socket
import stat
import struct
import time
from dataclasses import dataclass
from typing import Any

MAX_HEADER_BYTES = 4 << 20  # a spawn request carries the candidate's source (at most 1 MiB, escaped)
MAX_FDS = 64  # per message; more would be dropped by the kernel (MSG_CTRUNC), so senders split
_LEN = struct.Struct("!I")
# Output dtypes a candidate may return; anything else is refused before a byte is read.
TENSOR_DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8", "bool")


class WireError(Exception):
    """The peer broke the protocol: malformed frame, oversized header, wrong tensor, or it went away."""


class WireTimeout(WireError):
    pass


class PeerClosed(WireError):
    pass


@dataclass
class Message:
    header: dict[str, Any]
    fds: list[int]

    def close_fds(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


MAX_INT_DIGITS = 20  # past int64: a number that no field holds, and float() of it would overflow


def _bounded_int(text: str) -> int:
    """An integer of a header: one that no float could hold is refused (10**400 made the judge's float() raise)."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise WireError(f"an integer of {len(text)} digits")
    return int(text)


def send(sock: socket.socket, header: dict[str, Any], fds: list[int] | None = None) -> None:
    body = json.dumps(header, allow_nan=True).encode()
    if len(body) > MAX_HEADER_BYTES:
        raise WireError(f"header of {len(body)} bytes exceeds {MAX_HEADER_BYTES}")
    data = _LEN.pack(len(body)) + body
    fds = fds or []
    if len(fds) > MAX_FDS:
        raise WireError(f"{len(fds)} descriptors in one message; at most {MAX_FDS}")
    if fds:
        socket.send_fds(sock, [data[:1]], fds)
        data = data[1:]
    sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int, deadline: float, fds: list[int], want_fds: bool) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WireTimeout("no answer before the deadline")
        ready, _, _ = select.select([sock], [], [], min(remaining, 1.0))
        if not ready:
            continue
        if want_fds and not fds and got == 0:
            data, new_fds, flags, _addr = socket.recv_fds(sock, min(n - got, 1 << 16), MAX_FDS)
            fds.extend(new_fds)
            if flags & socket.MSG_CTRUNC:
                raise WireError("descriptors sent with a message were dropped (more than the limit)")
        else:
            data = sock.recv(min(n - got, 1 << 20))
        if not data:
            raise PeerClosed("the peer closed the connection")
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def recv(sock: socket.socket, timeout: float) -> Message:
    """The next message; raises WireTimeout, PeerClosed or WireError. Received fds belong to the caller."""
    deadline = time.monotonic() + timeout
    fds: list[int] = []
    try:
        (length,) = _LEN.unpack(_recv_exact(sock, _LEN.size, deadline, fds, want_fds=True))
        if length > MAX_HEADER_BYTES:
            raise WireError(f"a header of {length} bytes is over the {MAX_HEADER_BYTES}-byte limit")
        header = json.loads(_recv_exact(sock, length, deadline, fds, want_fds=False), parse_int=_bounded_int)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        _close_all(fds)
        raise WireError(f"malformed header: {exc}") from None
    except BaseException:
        _close_all(fds)
        raise
    if not isinstance(header, dict):
        _close_all(fds)
        raise WireError("a header must be a JSON object")
    return Message(header, fds)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


# -- tensors ----------------------------------------------------------------------------------------


def dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def tensor_spec(t: Any) -> dict[str, Any]:
    return {"dtype": dtype_name(t), "shape": list(t.shape), "device": t.device.type}


def tensor_to_fd(t: Any) -> int:
    """A memfd holding the tensor's bytes (contiguous, on the host)."""
    import torch

    host = t.detach().contiguous()
    nbytes = host.numel() * host.element_size()
    fd = os.memfd_create("tensor", os.MFD_CLOEXEC)
    if nbytes:
        os.ftruncate(fd, nbytes)
        with mmap.mmap(fd, nbytes) as mm:
            view = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes)
            view.copy_(host.reshape(-1).view(torch.uint8) if host.device.type == "cpu"
                       else host.reshape(-1).view(torch.uint8).cpu())
            del view
    return fd


def tensor_from_fd(fd: int, dtype: str, shape: list[int], limit_bytes: int) -> Any:
    """Read exactly dtype x shape bytes from a regular file descriptor into a fresh host tensor."""
    import torch

    if dtype not in TENSOR_DTYPES:
        raise WireError(f"tensor dtype {dtype!r} is not accepted")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise WireError(f"tensor shape {shape!r} is not a list of sizes")
    tdtype = getattr(torch, dtype)
    numel = 1
    for d in shape:
        numel *= d
    nbytes = numel * torch.empty((), dtype=tdtype).element_size()
    if nbytes > limit_bytes:
        raise WireError(f"a tensor of {nbytes} bytes is over the {limit_bytes}-byte limit")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise WireError("a tensor must arrive as a regular file")
    if st.st_size < nbytes:
        raise WireError(f"the tensor file holds {st.st_size} bytes; {nbytes} expected")
    if not nbytes:
        return torch.empty(shape, dtype=tdtype)
    # Read, never mapped: the sender keeps its own descriptor of the file and can shrink it at any moment, which
    # a mapping would answer with SIGBUS in this process. A short read is a refusal. A copy, too: what the sender
    # writes later changes nothing here.
    out = torch.empty(nbytes, dtype=torch.uint8)
    view = out.numpy().data
    done = 0
    while done < nbytes:
        got = os.preadv(fd, [view[done:]], done)
        if got <= 0:
            raise WireError(f"the tensor file ended after {done} of its {nbytes} bytes")
        done += got
    return out.view(tdtype).reshape(shape)


def pack_values(values: tuple[Any, ...] | list[Any]) -> tuple[list[dict[str, Any]], list[int]]:
    """Inputs for the wire: tensors as memfds, None, bools, ints and floats inline."""
    import torch

    specs: list[dict[str, Any]] = []
    fds: list[int] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            specs.append({"kind": "tensor", **tensor_spec(v), "fd": len(fds)})
            fds.append(tensor_to_fd(v))
        elif v is None or isinstance(v, (bool, int, float)):
            specs.append({"kind": "value", "value": v})
        else:
            raise TypeError(f"cannot send a value of type {type(v).__name__}")
    return specs, fds


def unpack_values(specs: list[dict[str, Any]], fds: list[int], limit_bytes: int) -> list[Any]:
    out: list[Any] = []
    for s in specs:
        if not isinstance(s, dict):
            raise WireError("a value spec must be an object")
        if s.get("kind") == "tensor":
            index = s.get("fd")
            if not isinstance(index, int) or not 0 <= index < len(fds):
                raise WireError("a tensor spec names no descriptor that came with it")
            out.append(tensor_from_fd(fds[index], s.get("dtype", ""), s.get("shape", []), limit_bytes))
        elif s.get("kind") == "value":
            v = s.get("value")
            if not (v is None or isinstance(v, (bool, int, float))):
                raise WireError("an inline value must be null, a bool or a number")
            out.append(v)
        else:
            raise WireError(f"unknown value kind {s.get('kind')!r}")
    return out


def checksums(values: list[Any] | tuple[Any, ...]) -> list[Any]:
    """Per input: a tensor's sum and sum of absolute values in float64 (any other value as itself). Both sides
    compute it over inputs generated from the same seed, to catch generation that differs between processes."""
    import torch

    out: list[Any] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            d = v.detach().to(torch.float64)
            out.append([float(d.sum()), float(d.abs().sum())])
        else:
            out.append(v)
    return out
