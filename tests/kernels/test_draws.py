"""kernels.draws: a timed rep's inputs drawn from the judge's seed and the previous rep's key.

The properties the chain rests on: the same seed and key give the same values in the candidate's process and the
judge's (which holds only the compact key the candidate reported), any bit of the key moves them, and the values
keep the distribution asked for. The GPU's Philox fill runs on the GPU where there is one, else in the Triton
interpreter (conftest sets it).
"""

from __future__ import annotations

import pytest
import torch

from kernels import get_problem, list_problems
from kernels.draws import (
    KEY_WORDS,
    TRITON_DRAWS_ENV,
    ChainedDraws,
    GeneratorDraws,
    fill,
    key_from_hex,
    key_hex,
    key_words,
)

NORMAL, UNIFORM, BELOW = 0, 1, 2
FILL_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _digest_rows(rows: int, seed: int, device: str = FILL_DEVICE) -> torch.Tensor:
    """Stand-ins for a rep's digest rows (int32, [outputs, 64])."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-(1 << 31), (1 << 31) - 1, (rows, 64), generator=g, dtype=torch.int32).to(device)


def _filled(n: int, key: torch.Tensor, seed: int = 7, stream: int = 1, kind: int = NORMAL,
            dtype: torch.dtype = torch.float32, a: float = 0.0, b: float = 1.0, bound: int = 1) -> torch.Tensor:
    out = torch.empty(n, dtype=dtype, device=key.device)
    fill(out, key, seed, stream, kind, a, b, bound)
    return out.cpu()


def _rotl(word: int, bits: int) -> int:
    return ((word << bits) | (word >> (32 - bits))) & 0xFFFFFFFF


def test_a_key_crosses_as_hex_and_stands_for_its_rows_combined() -> None:
    rows = _digest_rows(2, 1)
    words = key_words(rows)
    # Row 0 as it is, row 1 rotated left by 8 bits ((7 * 1) % 31 + 1), XORed word by word.
    assert words == tuple((int(x) & 0xFFFFFFFF) ^ _rotl(int(y) & 0xFFFFFFFF, 8)
                          for x, y in zip(rows[0, :KEY_WORDS].tolist(), rows[1, :KEY_WORDS].tolist()))
    compact = key_from_hex(key_hex(rows), FILL_DEVICE)
    assert compact.shape == (1, KEY_WORDS) and compact.dtype == torch.int32 and key_words(compact) == words
    for bad in ("", "0" * 31, "g" * 32, 5):
        with pytest.raises(ValueError):
            key_from_hex(bad, "cpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        key_words(rows[0])  # a key has rows


def test_outputs_with_equal_digests_do_not_cancel_to_a_known_key() -> None:
    """A key that is zero whatever the outputs would let the next rep's inputs be drawn before they exist."""
    same = _digest_rows(1, 8).repeat(2, 1)
    assert key_words(same) != (0,) * KEY_WORDS
    assert not torch.equal(_filled(4096, same), _filled(4096, torch.zeros_like(same)))


def test_no_key_makes_two_seeds_draw_the_same_values() -> None:
    """A key reported for a rep nobody checks is the candidate's choice, and it knows the next rep's seed: were the
    seed mixed into a word the key also reaches (k2 ^ seed, as it once was), flipping k2 by the two seeds' XOR
    would draw the same values for both, outputs it could have computed once."""
    key = _digest_rows(1, 9)
    s1, s2 = 0x1234567, 0x7654321
    flipped = key.clone()
    flipped[0, 2] ^= s1 ^ s2
    first = _filled(4096, key, seed=s1)
    for candidate in (key, flipped):
        assert (_filled(4096, candidate, seed=s2) != first).float().mean() > 0.99


def test_a_draw_refuses_a_tensor_of_the_wrong_kind() -> None:
    key = _digest_rows(1, 10)
    with pytest.raises(ValueError):
        fill(torch.empty(8, device=FILL_DEVICE), key, 1, 1, BELOW, 0.0, 0.0, 4)
    with pytest.raises(ValueError):
        fill(torch.empty(8, dtype=torch.int64, device=FILL_DEVICE), key, 1, 1, NORMAL, 0.0, 1.0)
    with pytest.raises(ValueError):
        fill(torch.empty(8, dtype=torch.int64, device=FILL_DEVICE), key, 1, 1, BELOW, 0.0, 0.0, 1 << 25)


def test_the_fill_reads_the_key_as_the_judge_holds_it() -> None:
    """The candidate's refill reads the digest rows; the judge draws the same values from the compact key."""
    rows = _digest_rows(2, 2)
    assert torch.equal(_filled(5000, rows), _filled(5000, key_from_hex(key_hex(rows), FILL_DEVICE)))


def test_every_part_of_the_key_the_seed_and_the_draw_moves_the_values() -> None:
    rows = _digest_rows(1, 3)
    base = _filled(4100, rows)
    assert torch.equal(base, _filled(4100, rows))
    for word in range(KEY_WORDS):
        for bit in (0, 17, 31):
            flipped = rows.clone()
            flipped[0, word] ^= (1 << bit) - (1 << 32 if bit == 31 else 0)  # as an int32
            moved = _filled(4100, flipped)
            assert (moved != base).float().mean() > 0.99, (word, bit)
    assert (_filled(4100, rows, seed=8) != base).float().mean() > 0.99
    assert (_filled(4100, rows, stream=2) != base).float().mean() > 0.99
    # Words past the key's first KEY_WORDS are not part of it.
    later = rows.clone()
    later[0, KEY_WORDS:] = 0
    assert torch.equal(_filled(4100, later), base)


def test_the_fill_keeps_the_distribution_asked_for_and_its_length() -> None:
    key = _digest_rows(1, 4)
    normal = _filled(200_003, key, a=1.5, b=2.0).double()
    assert abs(float(normal.mean()) - 1.5) < 0.03 and abs(float(normal.std()) - 2.0) < 0.03
    uniform = _filled(100_000, key, kind=UNIFORM, a=-3.0, b=5.0)
    assert float(uniform.min()) >= -3.0 and float(uniform.max()) <= 5.0
    assert abs(float(uniform.double().mean()) - 1.0) < 0.05
    below = _filled(70_000, key, kind=BELOW, dtype=torch.int64, bound=7)
    counts = torch.bincount(below, minlength=7)
    assert int(below.min()) >= 0 and int(below.max()) <= 6 and counts.shape == (7,)
    assert float(counts.min()) > 0.9 * 10_000 and float(counts.max()) < 1.1 * 10_000
    half = _filled(10_000, key, dtype=torch.bfloat16, b=2.0)
    assert half.dtype == torch.bfloat16 and abs(float(half.double().std()) - 2.0) < 0.1
    # The masked tail: nothing past the tensor is written.
    buf = torch.full((5000,), 123.0, device=FILL_DEVICE)
    fill(buf[:4097], key, 1, 1, NORMAL, 0.0, 1.0)
    assert torch.all(buf[4097:] == 123.0) and not torch.any(buf[:4097] == 123.0)


def test_off_a_gpu_the_chained_draws_mix_the_key_into_a_generators_seed() -> None:
    rows = _digest_rows(2, 5, "cpu")

    def draw(seed: int, key: torch.Tensor | None) -> torch.Tensor:
        return ChainedDraws(seed, key, "cpu").normal_(torch.empty(1000))

    assert torch.equal(draw(1, rows), draw(1, key_from_hex(key_hex(rows), "cpu")))
    assert not torch.equal(draw(1, rows), draw(2, rows))
    assert not torch.equal(draw(1, rows), draw(1, None))
    assert torch.equal(draw(1, None), draw(1, torch.zeros((1, KEY_WORDS), dtype=torch.int32)))
    # ...and a chained draw is not the generator's draw for the same seed.
    assert not torch.equal(draw(1, None), GeneratorDraws(1, "cpu").normal_(torch.empty(1000)))


@pytest.mark.parametrize("device", ["cpu", *(["cuda"] if torch.cuda.is_available() else [])])
@pytest.mark.parametrize("name", [p.name for p in list_problems()])
def test_a_reps_inputs_follow_the_key_of_the_rep_before(name: str, device: str) -> None:
    problem = get_problem(name)
    base = problem.inputs("small", 1, device)

    def refilled(seed: int, key: torch.Tensor | None) -> list[torch.Tensor]:
        buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in base]
        problem.refill(buffers, "small", seed, key)
        return [x for x in buffers if isinstance(x, torch.Tensor)]

    rows = _digest_rows(len(problem.output_names), 6, device)
    same = refilled(9, rows)
    assert all(torch.equal(x, y) for x, y in zip(same, refilled(9, key_from_hex(key_hex(rows), device))))
    other = refilled(9, _digest_rows(len(problem.output_names), 7, device))
    # Every input drawn at random moves with the key (KDA's fixed-range ones too: A_log, dt_bias).
    assert all(not torch.equal(x, y) for x, y in zip(same, other))


@pytest.mark.parametrize(("name", "drawn"), [("softmax", (0,)), ("mla_decode", (0, 1)), ("kda", (0, 2, 7))])
def test_the_fill_keeps_make_inputs_distribution(name: str, drawn: tuple[int, ...],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A timed rep's refill through the GPU's fill (here in the interpreter) draws what make_inputs draws: checked on
    the inputs whose spread does not hang on a few per-head draws (KDA's q, v and initial state)."""
    monkeypatch.setenv(TRITON_DRAWS_ENV, "1")
    problem = get_problem(name)
    made = problem.inputs("small", 5, FILL_DEVICE)
    refilled = [x.clone() if isinstance(x, torch.Tensor) else x for x in made]
    problem.refill(refilled, "small", 6, _digest_rows(len(problem.output_names), 11, FILL_DEVICE))
    for i in drawn:
        m64, r64 = made[i].double(), refilled[i].double()
        assert not torch.equal(m64, r64)
        assert abs(float(m64.mean() - r64.mean())) < 0.05 * max(1.0, float(m64.std())), i
        assert abs(float(m64.std()) / float(r64.std()) - 1) < 0.05, i
