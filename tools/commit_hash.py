"""A timed rep's digest of its outputs, on the GPU: what the rep commits to before its batch returns.

The commitment proves that a rep's outputs existed when its batch ended (tools.timing.commit_outputs): the judge
fetches the reps it checks afterwards and recomputes their digests. A sum of the outputs' bit patterns, which it
was, can be met after the fact: a process that ran nothing in its reps, committed any number, and computed the
checked reps' outputs only when they were fetched could then move a few elements (sign flips of tiny ones, a few
ulps of others, all inside the tolerance) until the sum came out right, in milliseconds. So the digest is a sponge
over a ChaCha permutation: each column of a program absorbs 4 words (128 bits) at a time into a 16-word state
(384 bits of capacity), with two double rounds between blocks; each program squeezes 8 words a column, and the
levels repeat until FINAL_WORDS words are left. Outputs that differ anywhere, by one bit, in place or in length,
give other digests; meeting a given digest with other outputs costs a search of the order of 2^128 or more.

The same kernel runs in the candidate's process (its rep) and in the judge's (the check), on the same GPU: integer
arithmetic, so the two agree to the bit. Off a GPU (the interpreter's timed protocol) tools.timing uses SHA-256.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

ROWS = 64  # 4-word blocks a column absorbs in one program
WIDE_BLOCK, NARROW_BLOCK = 128, 8  # columns a program: the wide levels, then the last ones
SQUEEZE_WORDS = 8  # words a column gives the next level
FINAL_WORDS = NARROW_BLOCK * SQUEEZE_WORDS  # what is left: 64 words, 256 bytes


@triton.jit
def _quarter(a, b, c, d):
    a = a + b
    d = d ^ a
    d = (d << 16) | (d >> 16)
    c = c + d
    b = b ^ c
    b = (b << 12) | (b >> 20)
    a = a + b
    d = d ^ a
    d = (d << 8) | (d >> 24)
    c = c + d
    b = b ^ c
    b = (b << 7) | (b >> 25)
    return a, b, c, d


@triton.jit
def _double_round(s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15):
    s0, s4, s8, s12 = _quarter(s0, s4, s8, s12)
    s1, s5, s9, s13 = _quarter(s1, s5, s9, s13)
    s2, s6, s10, s14 = _quarter(s2, s6, s10, s14)
    s3, s7, s11, s15 = _quarter(s3, s7, s11, s15)
    s0, s5, s10, s15 = _quarter(s0, s5, s10, s15)
    s1, s6, s11, s12 = _quarter(s1, s6, s11, s12)
    s2, s7, s8, s13 = _quarter(s2, s7, s8, s13)
    s3, s4, s9, s14 = _quarter(s3, s4, s9, s14)
    return s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15


@triton.jit
def _row_words(words_ptr, at, n_words, more):
    """The four words of a row at offsets `at` .. `at` + 3 (zeros past n_words, or where there is no such row)."""
    m0 = tl.load(words_ptr + at, mask=more & (at < n_words), other=0).to(tl.uint32, bitcast=True)
    m1 = tl.load(words_ptr + at + 1, mask=more & (at + 1 < n_words), other=0).to(tl.uint32, bitcast=True)
    m2 = tl.load(words_ptr + at + 2, mask=more & (at + 2 < n_words), other=0).to(tl.uint32, bitcast=True)
    m3 = tl.load(words_ptr + at + 3, mask=more & (at + 3 < n_words), other=0).to(tl.uint32, bitcast=True)
    return m0, m1, m2, m3


@triton.jit(do_not_specialize=["n_words", "level"])
def absorb_kernel(words_ptr, n_words, level, out_ptr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """Program p, column j: words p * ROWS * 4 * BLOCK + (r * BLOCK + j) * 4 + (0..3) for r < ROWS (zeros past
    n_words), absorbed in order; SQUEEZE_WORDS words of its state to out[p, j, :]. The state starts from ChaCha's
    constants with the column, the program, the level and the length in it, so that no two places hash alike."""
    pid = tl.program_id(0)
    col = tl.arange(0, BLOCK)
    zero = tl.zeros([BLOCK], dtype=tl.uint32)
    s0 = zero + 0x61707865
    s1 = zero + 0x3320646E
    s2 = zero + 0x79622D32
    s3 = zero + 0x6B206574
    s4 = col.to(tl.uint32)
    s5 = zero + pid.to(tl.uint32)
    s6 = zero + level.to(tl.uint32)
    s7 = zero + n_words.to(tl.uint32)
    s8 = zero + 0x243F6A88
    s9 = zero + 0x85A308D3
    s10 = zero + 0x13198A2E
    s11 = zero + 0x03707344
    s12 = zero + 0xA4093822
    s13 = zero + 0x299F31D0
    s14 = zero + 0x082EFA98
    s15 = zero + 0xEC4E6C89
    # Each row's four words are loaded one row ahead: the loads do not depend on the state, so their latency
    # hides behind the previous row's rounds instead of adding up over ROWS serial rows.
    at = pid.to(tl.int64) * (ROWS * 4 * BLOCK) + col * 4
    m0, m1, m2, m3 = _row_words(words_ptr, at, n_words, True)
    for r in range(ROWS):
        n0, n1, n2, n3 = _row_words(words_ptr, at + 4 * BLOCK, n_words, r + 1 < ROWS)
        s0 ^= m0
        s1 ^= m1
        s2 ^= m2
        s3 ^= m3
        for _ in tl.static_range(2):
            s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15 = _double_round(
                s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
        m0, m1, m2, m3 = n0, n1, n2, n3
        at += 4 * BLOCK
    for _ in tl.static_range(2):
        s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15 = _double_round(
            s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    out = out_ptr + (pid.to(tl.int64) * BLOCK + col) * 8
    tl.store(out, s0.to(tl.int32, bitcast=True))
    tl.store(out + 1, s1.to(tl.int32, bitcast=True))
    tl.store(out + 2, s2.to(tl.int32, bitcast=True))
    tl.store(out + 3, s3.to(tl.int32, bitcast=True))
    tl.store(out + 4, s4.to(tl.int32, bitcast=True))
    tl.store(out + 5, s5.to(tl.int32, bitcast=True))
    tl.store(out + 6, s6.to(tl.int32, bitcast=True))
    tl.store(out + 7, s7.to(tl.int32, bitcast=True))


def words_of(t: Any) -> Any:
    """A tensor's bytes as 32-bit words (a copy, padded with zeros, where its size or its start is not a multiple of
    4 bytes)."""
    import torch

    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    if flat.numel() % 4 or flat.storage_offset() % 4:  # a 2-byte view's words would straddle its start
        flat = torch.cat([flat, flat.new_zeros((-flat.numel()) % 4)])
    return flat.view(torch.int32)


def gpu_digest(t: Any, out: Any) -> None:
    """Write the FINAL_WORDS-word digest of `t` (a CUDA tensor) into `out` (FINAL_WORDS int32, on its device)."""
    import torch

    words = words_of(t)
    level = 0
    while True:
        n = words.numel()
        block = WIDE_BLOCK if n > ROWS * 4 * NARROW_BLOCK else NARROW_BLOCK
        programs = triton.cdiv(max(n, 1), ROWS * 4 * block)
        last = programs == 1 and block == NARROW_BLOCK
        dest = out if last else torch.empty(programs * block * SQUEEZE_WORDS, dtype=torch.int32, device=t.device)
        absorb_kernel[(programs,)](words, n, level, dest, ROWS=ROWS, BLOCK=block, num_warps=4)
        if last:
            return
        words = dest
        level += 1
