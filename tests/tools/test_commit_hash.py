"""The GPU digest a timed rep commits to (tools.commit_hash), run under the interpreter against a plain numpy
statement of the same sponge, and the properties the commitment needs: every bit, place and length counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tools.commit_hash import FINAL_WORDS, NARROW_BLOCK, ROWS, SQUEEZE_WORDS, WIDE_BLOCK, gpu_digest, words_of
from tools.timing import DIGEST_WORDS

MASK = np.uint64(0xFFFFFFFF)
CONSTANTS = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574]
TAIL = [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0, 0x082EFA98, 0xEC4E6C89]
COLUMNS = [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)]
DIAGONALS = [(0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)]


def rotl(x: np.ndarray, n: int) -> np.ndarray:
    return ((x << np.uint64(n)) | (x >> np.uint64(32 - n))) & MASK


def quarter(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, ...]:
    a = (a + b) & MASK
    d = rotl(d ^ a, 16)
    c = (c + d) & MASK
    b = rotl(b ^ c, 12)
    a = (a + b) & MASK
    d = rotl(d ^ a, 8)
    c = (c + d) & MASK
    b = rotl(b ^ c, 7)
    return a, b, c, d


def double_round(s: list[np.ndarray]) -> None:
    for q in COLUMNS + DIAGONALS:
        s[q[0]], s[q[1]], s[q[2]], s[q[3]] = quarter(*(s[i] for i in q))


def programs_for(n: int, block: int) -> int:
    return max(1, -(-max(n, 1) // (ROWS * 4 * block)))


def level(words: np.ndarray, lvl: int, block: int) -> np.ndarray:
    n = len(words)
    programs = programs_for(n, block)
    w = np.zeros(programs * ROWS * 4 * block, dtype=np.uint64)
    w[:n] = words.astype(np.uint32).astype(np.uint64)
    w = w.reshape(programs, ROWS, block, 4)
    out = np.zeros((programs, block, SQUEEZE_WORDS), dtype=np.uint64)
    col = np.arange(block, dtype=np.uint64)
    for p in range(programs):
        s = ([np.full(block, c, dtype=np.uint64) for c in CONSTANTS]
             + [col.copy(), np.full(block, p, np.uint64), np.full(block, lvl, np.uint64), np.full(block, n, np.uint64)]
             + [np.full(block, c, dtype=np.uint64) for c in TAIL])
        for r in range(ROWS):
            for k in range(4):
                s[k] = s[k] ^ w[p, r, :, k]
            double_round(s)
            double_round(s)
        double_round(s)
        double_round(s)
        for k in range(SQUEEZE_WORDS):
            out[p, :, k] = s[k]
    return out.reshape(-1).astype(np.uint32).view(np.int32)


def digest(words: np.ndarray) -> np.ndarray:
    lvl = 0
    while True:
        n = len(words)
        block = WIDE_BLOCK if n > ROWS * 4 * NARROW_BLOCK else NARROW_BLOCK
        words = level(words, lvl, block)
        if programs_for(n, block) == 1 and block == NARROW_BLOCK:
            return words
        lvl += 1


def kernel_digest(t: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(FINAL_WORDS, dtype=torch.int32)
    gpu_digest(t, out)
    return out


def test_the_digest_is_as_wide_as_a_commitment_row() -> None:
    assert FINAL_WORDS == DIGEST_WORDS


@pytest.mark.parametrize("n", [0, 3, 2048, 2049, 40000])  # nothing, a partial word, one narrow level, two, three
def test_the_kernel_computes_the_sponge_it_states(n: int) -> None:
    t = torch.randn(n).to(torch.bfloat16)
    assert np.array_equal(kernel_digest(t).numpy(), digest(words_of(t).numpy()))


def test_one_bit_a_swap_or_a_longer_tensor_gives_another_digest() -> None:
    """On the numpy statement (the kernel's equal, above), for speed under the interpreter."""

    def kernel_digest(t: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(digest(words_of(t).numpy()))

    t = torch.randn(3000)
    base = kernel_digest(t)
    flipped = t.clone()
    flipped.view(torch.int32)[1234] ^= 1
    swapped = t.clone()
    swapped[[7, 2900]] = t[[2900, 7]]
    longer = torch.cat([t, torch.zeros(1)])
    for other in (flipped, swapped, longer):
        assert not torch.equal(kernel_digest(other), base)
    assert torch.equal(kernel_digest(t.clone()), base)


def test_a_view_that_starts_between_words_is_digested_as_its_own_bytes() -> None:
    base = torch.randn(1026).to(torch.float16)
    view = base[1:1025]
    assert view.storage_offset() % 2 == 1  # 2 bytes past a word
    assert torch.equal(words_of(view), words_of(view.clone()))


def test_the_judge_and_the_rep_pick_the_digest_by_the_profile_not_by_a_tensors_device() -> None:
    """The judge's fetched outputs arrive on the host; a rep's are on the GPU: the digest is chosen by whether the
    profile runs on a GPU, so both compute the same one."""
    from tools.timing import committed

    t = torch.randn(100)
    cpu = committed([t], gpu=False)
    assert cpu == committed([t.clone()], gpu=False) and len(cpu.digests) == 1 and len(cpu.digests[0]) == 64
    if torch.cuda.is_available():
        assert committed([t], gpu=True) == committed([t.cuda()], gpu=True) != cpu
