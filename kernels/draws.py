"""Where a problem's random inputs come from: a seed, and for a timed rep also the digest of the rep before it.

A problem writes its inputs once, against `Draws` (normal, uniform, integers below a bound), and gets them two ways:
- `GeneratorDraws(seed, device)`: a torch.Generator; the inputs of the checks and of a timing's set-up.
- `ChainedDraws(seed, key, device)`: a timed rep's refill. `key` holds the digest rows (int32, first KEY_WORDS words
  of each row) of the outputs of the rep before it in its batch, so no rep's inputs exist before the rep before it
  has produced its outputs: a candidate's process cannot draw a batch's inputs up front and serve every rep from
  one stacked call. The judge, which fetches a sample of reps, draws a checked rep's inputs again from the key its
  predecessor reported and checks that key against the outputs of every rep it fetches (tools.judge): a key made
  up in advance is refused wherever that rep is checked.

On a GPU the key never leaves the device (the refill reads it there; a host read would make the rep wait for
the GPU, and the bracket needs the reps queued ahead): the values come from a Triton kernel, Philox keyed by the
key's words, the judge's seed and a draw counter. Off a GPU the key is read on the host and mixed into the
seed of a torch.Generator (or, with MARATHON_TRITON_DRAWS=1, the same fill in the Triton interpreter). The two give
different numbers for one seed and key; each is deterministic.
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any, Protocol

import torch

KEY_WORDS = 4  # the words of each digest row a key is made of: 128 bits
# Set to 1 (in the judge's and the candidate's processes alike: they inherit it), CPU draws take the GPU's path
# too, the Philox fill, in the Triton interpreter: slow (tens of ms a draw), for tests of that path end to end.
TRITON_DRAWS_ENV = "MARATHON_TRITON_DRAWS"
_FILL_BLOCK = 1024  # Philox counters a program: 4 values each


class Draws(Protocol):
    """Random values for one set of a problem's inputs."""

    device: torch.device

    def normal_(self, out: torch.Tensor, mean: float = 0.0, std: float = 1.0) -> torch.Tensor: ...

    def uniform_(self, out: torch.Tensor, low: float = 0.0, high: float = 1.0) -> torch.Tensor: ...

    def below_(self, out: torch.Tensor, bound: int) -> torch.Tensor:
        """Integers in [0, bound) into an int64 tensor."""
        ...


class GeneratorDraws:
    """Draws from one torch.Generator seeded with `seed`."""

    def __init__(self, seed: int, device: str | torch.device) -> None:
        self.device = torch.device(device)
        self.generator = _generator(self.device).manual_seed(seed)

    def normal_(self, out: torch.Tensor, mean: float = 0.0, std: float = 1.0) -> torch.Tensor:
        return out.normal_(mean, std, generator=self.generator)

    def uniform_(self, out: torch.Tensor, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        return out.uniform_(low, high, generator=self.generator)

    def below_(self, out: torch.Tensor, bound: int) -> torch.Tensor:
        return out.random_(0, bound, generator=self.generator)


class ChainedDraws:
    """A timed rep's draws: from the judge's `seed` and `key`, the digest rows of the previous rep's outputs
    (int32, [rows, >= KEY_WORDS], on the device of the inputs), or None for a batch's first rep."""

    def __init__(self, seed: int, key: torch.Tensor | None, device: str | torch.device) -> None:
        self.device = torch.device(device)
        self.seed = int(seed) & 0x7FFFFFFF
        self.stream = 0
        if self.device.type == "cuda" or os.environ.get(TRITON_DRAWS_ENV) == "1":
            self.key = key if key is not None else _zero_key(self.device)
            self.fallback: GeneratorDraws | None = None
        else:
            words = key_words(key) if key is not None else (0,) * KEY_WORDS
            self.fallback = GeneratorDraws(_mixed_seed(self.seed, words), self.device)

    def normal_(self, out: torch.Tensor, mean: float = 0.0, std: float = 1.0) -> torch.Tensor:
        if self.fallback is not None:
            return self.fallback.normal_(out, mean, std)
        return self._fill(out, _NORMAL, mean, std)

    def uniform_(self, out: torch.Tensor, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        if self.fallback is not None:
            return self.fallback.uniform_(out, low, high)
        return self._fill(out, _UNIFORM, low, high)

    def below_(self, out: torch.Tensor, bound: int) -> torch.Tensor:
        if self.fallback is not None:
            return self.fallback.below_(out, bound)
        if out.dtype != torch.int64:
            raise TypeError(f"below_ fills an int64 tensor, not {out.dtype}")
        return self._fill(out, _BELOW, 0.0, 0.0, bound)

    def _fill(self, out: torch.Tensor, kind: int, a: float, b: float, bound: int = 1) -> torch.Tensor:
        if not out.is_contiguous():
            raise ValueError("a chained draw fills a contiguous tensor")
        self.stream += 1
        fill(out, self.key, self.seed, self.stream, kind, a, b, bound)
        return out


def key_words(key: torch.Tensor) -> tuple[int, ...]:
    """The KEY_WORDS words a key stands for: the XOR over its rows ([rows, >= KEY_WORDS]) of each row's first words
    (as uint32), row r > 0 rotated left by (7 r mod 31) + 1 bits first, as the fill does."""
    if key.dim() != 2 or key.shape[1] < KEY_WORDS:
        raise ValueError(f"a key is a [rows, >= {KEY_WORDS}] tensor, not {list(key.shape)}")
    words = [0] * KEY_WORDS
    for r, row in enumerate(key.detach().to("cpu", torch.int64)[:, :KEY_WORDS].tolist()):
        t = (7 * r) % 31 + 1 if r else 0
        words = [w ^ _rotl(v & 0xFFFFFFFF, t) for w, v in zip(words, row)]
    return tuple(words)


def _rotl(word: int, bits: int) -> int:
    return ((word << bits) | (word >> (32 - bits))) & 0xFFFFFFFF if bits else word


def key_hex(key: torch.Tensor) -> str:
    """A key as it crosses between processes: its words, big-endian hex."""
    return "".join(f"{w:08x}" for w in key_words(key))


def key_from_hex(text: str, device: str | torch.device) -> torch.Tensor:
    """The key `key_hex` wrote, as one row on `device` (ValueError for anything else)."""
    if not isinstance(text, str) or len(text) != 8 * KEY_WORDS:
        raise ValueError(f"a key is {8 * KEY_WORDS} hex digits")
    words = [int(text[8 * i:8 * i + 8], 16) for i in range(KEY_WORDS)]
    signed = [w - (1 << 32) if w >= 1 << 31 else w for w in words]
    return torch.tensor([signed], dtype=torch.int32, device=device)


def _mixed_seed(seed: int, words: tuple[int, ...]) -> int:
    data = seed.to_bytes(4, "little") + b"".join(w.to_bytes(4, "little") for w in words)
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little") & ((1 << 63) - 1)


@functools.cache
def _generator(device: torch.device) -> torch.Generator:
    """One generator per device, re-seeded for each set of inputs: building one costs the host more than a draw,
    and a timed rep's refill must stay cheap on the host."""
    return torch.Generator(device=device)


@functools.cache
def _zero_key(device: torch.device) -> torch.Tensor:
    return torch.zeros((1, KEY_WORDS), dtype=torch.int32, device=device)


_NORMAL, _UNIFORM, _BELOW = 0, 1, 2


def fill(out: torch.Tensor, key: torch.Tensor, seed: int, stream: int, kind: int, a: float, b: float,
         bound: int = 1) -> None:
    """Launch the Philox fill (any device Triton runs on: a GPU, or the interpreter in tests)."""
    import triton

    n = out.numel()
    if n == 0:
        return
    if n >= 1 << 34:
        raise ValueError("a chained draw fills fewer than 2^34 values")
    if key.dtype != torch.int32 or key.dim() != 2 or key.shape[1] < KEY_WORDS or key.stride(1) != 1:
        raise ValueError("a key is an int32 [rows, >= 4] tensor with contiguous rows")
    if key.device != out.device:
        raise ValueError(f"the key is on {key.device}, the values to fill on {out.device}")
    if (kind == _BELOW) != (out.dtype == torch.int64) or (kind == _BELOW and not 0 < bound <= 1 << 24):
        raise ValueError("integers below a bound (at most 2^24: exact in float32) fill an int64 tensor, other draws "
                         "a floating one")
    grid = (triton.cdiv(n, 4 * _FILL_BLOCK),)
    _fill_kernel()[grid](out, n, key, int(key.shape[0]), key.stride(0), seed, stream, float(a), float(b), int(bound),
                         KIND=kind, BLOCK=_FILL_BLOCK)


@functools.cache
def _fill_kernel() -> Any:
    """Built on first use: importing kernels must not import Triton (the CLI lists problems without it)."""
    import triton
    import triton.language as tl

    # The seed, the counter and the sizes vary from rep to rep: specialising on them would compile again inside
    # a timed batch. The key's rows too (the judge's one, a rep's one per output): one compile per dtype and kind
    # (each new source's process compiles its own).
    @triton.jit(do_not_specialize=["n", "key_rows", "key_stride", "seed", "stream", "bound"])
    def fill_kernel(out_ptr, n, key_ptr, key_rows, key_stride, seed, stream, a, b, bound,
                    KIND: tl.constexpr, BLOCK: tl.constexpr):
        k0 = tl.load(key_ptr + 0).to(tl.uint32, bitcast=True)
        k1 = tl.load(key_ptr + 1).to(tl.uint32, bitcast=True)
        k2 = tl.load(key_ptr + 2).to(tl.uint32, bitcast=True)
        k3 = tl.load(key_ptr + 3).to(tl.uint32, bitcast=True)
        u = k0 * 0  # 7 r mod 31, as a uint32 (the rotation of row r is u + 1 bits)
        for r in range(1, key_rows):  # each further row rotated first (key_words): equal rows do not cancel
            u = (u + 7) % 31
            t = u + 1
            w0 = tl.load(key_ptr + r * key_stride + 0).to(tl.uint32, bitcast=True)
            w1 = tl.load(key_ptr + r * key_stride + 1).to(tl.uint32, bitcast=True)
            w2 = tl.load(key_ptr + r * key_stride + 2).to(tl.uint32, bitcast=True)
            w3 = tl.load(key_ptr + r * key_stride + 3).to(tl.uint32, bitcast=True)
            k0 = k0 ^ ((w0 << t) | (w0 >> (32 - t)))
            k1 = k1 ^ ((w1 << t) | (w1 >> (32 - t)))
            k2 = k2 ^ ((w2 << t) | (w2 >> (32 - t)))
            k3 = k3 ^ ((w3 << t) | (w3 >> (32 - t)))
        pid = tl.program_id(0).to(tl.int64)
        counter = pid * BLOCK + tl.arange(0, BLOCK)  # below 2^32 (fill: n < 2^34, 4 values a counter)
        c0 = counter.to(tl.uint32)
        zero = c0 * 0
        # The judge's seed has a counter word of its own, where no key word reaches it: a key made up for a rep
        # nobody checks cannot cancel the seed of the rep after it (as k2 ^ seed could), so no choice of key makes
        # two seeds draw the same inputs. The key moves Philox's key and the last counter word (96 of its bits).
        philox_key = ((k1 ^ k3).to(tl.uint64) << 32) | k0.to(tl.uint64)
        c1 = zero + stream.to(tl.uint32)
        c2 = zero + seed.to(tl.uint32)
        c3 = zero + k2
        r0, r1, r2, r3 = tl.philox(philox_key, c0, c1, c2, c3)
        u0 = tl.uint_to_uniform_float(r0)
        u1 = tl.uint_to_uniform_float(r1)
        u2 = tl.uint_to_uniform_float(r2)
        u3 = tl.uint_to_uniform_float(r3)
        if KIND == 0:
            v0, v1 = tl.pair_uniform_to_normal(u0, u1)
            v2, v3 = tl.pair_uniform_to_normal(u2, u3)
            v0, v1, v2, v3 = a + b * v0, a + b * v1, a + b * v2, a + b * v3
        elif KIND == 1:
            v0, v1, v2, v3 = a + (b - a) * u0, a + (b - a) * u1, a + (b - a) * u2, a + (b - a) * u3
        else:
            # A uniform float can round up to 1.0: the bound is clamped below.
            top = bound - 1
            v0 = tl.minimum((u0 * bound).to(tl.int64), top)
            v1 = tl.minimum((u1 * bound).to(tl.int64), top)
            v2 = tl.minimum((u2 * bound).to(tl.int64), top)
            v3 = tl.minimum((u3 * bound).to(tl.int64), top)
        at = pid * (4 * BLOCK) + tl.arange(0, BLOCK)
        ty = out_ptr.dtype.element_ty
        tl.store(out_ptr + at, v0.to(ty), mask=at < n)
        tl.store(out_ptr + at + BLOCK, v1.to(ty), mask=at + BLOCK < n)
        tl.store(out_ptr + at + 2 * BLOCK, v2.to(ty), mask=at + 2 * BLOCK < n)
        tl.store(out_ptr + at + 3 * BLOCK, v3.to(ty), mask=at + 3 * BLOCK < n)

    return fill_kernel

