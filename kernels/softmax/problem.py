"""Row softmax: the warm-up problem, small enough to learn the tools on.

softmax(x) over the last dimension of a 2-D float32 tensor. Memory-bound: one read of x and one
write of the output is the floor, so the roofline is bandwidth. The float64 reference is in reference.py.
"""

from __future__ import annotations

import functools

import torch

from kernels.draws import Draws, GeneratorDraws
from kernels.softmax.reference import reference
from kernels.spec import Baseline, Dims, Inputs, Problem, Tolerance

# Every row is shifted by an offset; the offsets are spread evenly over [-ROW_OFFSET, ROW_OFFSET]
# and shuffled (a fixed shuffle, rotated by a random number of rows: a draw that needs no sort, see _draw).
# Softmax does not change, but exp() of an unshifted row overflows float32 (above
# 88.7) or, but for its outlier (below), underflows to 0 (below -103.9) on the outer rows, so a kernel
# that skips the max subtraction fails the check at every shape instead of passing by luck.
ROW_OFFSET = 120.0
# Spread of the values inside a row: wide enough that softmax is far from flat (max weight over
# 8192 columns is a few percent), narrow enough that it is not one-hot.
ROW_STD = 2.0
# One row in each block of OUTLIER_EVERY rows (at least one row; rows past the last whole block have none) holds one
# element above the rest, at a random row of the block and a random column, by heights spread evenly over
# [OUTLIER_LOW, OUTLIER_HIGH], the highest in the first block (the only one, where there is one): the offsets alone let
# any element of a row serve as its shift (its spread is a few ROW_STD), so a kernel that shifted by the row's first
# element, or by the max of part of the row, passed. Above such a shift by more than exp's float32 range (88.7), an
# outlier overflows it; and since the heights span more than that range and the underflow's (103) together, no
# constant added to the shift works for every row (the highest rows overflow, or the plain ones underflow).
# Those rows' softmax is nearly one-hot.
OUTLIER_EVERY = 8
OUTLIER_LOW, OUTLIER_HIGH = 110.0, 250.0
# max, subtract, exp, sum and divide: five operations an element (exp counted as one).
FLOPS_PER_ELEMENT = 5

DESCRIPTION = f"""\
# softmax (warm-up)

`entry(x) -> out`: `out[i, :] = softmax(x[i, :])`, the softmax over the last dimension.

- `x`: `(rows, cols)`, row-major and contiguous; float32 on the GPU and on the CPU (interpreter).
- `out`: same shape and dtype as `x`, a fresh tensor (`x` must not be modified).

Inputs are `{ROW_STD:g} * randn` plus a per-row offset spread over `[-{ROW_OFFSET:g}, {ROW_OFFSET:g}]`, and one row
in {OUTLIER_EVERY} has one element {OUTLIER_LOW:g} to {OUTLIER_HIGH:g} above the rest at a random column (the heights
spread over the rows): a kernel must subtract the row maximum (or keep a running one) before `exp`, or it
over/underflows.

Shapes: `bench` (4096 x 8192, 128 MiB each way: a bandwidth problem, about 63 us at 4.24 TB/s),
`small` (67 x 129) and `odd` (3 x 1000): neither is a power of two, so the tails must be masked.

Reference: float64 softmax, returned as float32. Tolerance: relative Frobenius error 2e-5 and
|out - ref| <= 1e-7 + 1e-4 |ref| elementwise: float32 arithmetic with a hardware approximate exp
passes with a wide margin, anything in half precision does not.

Baseline: `torch` (`torch.softmax`, eager).
"""


def make_inputs(dims: Dims, seed: int, device: str, dtype: torch.dtype | None = None) -> Inputs:
    """`ROW_STD * randn + offset[row]` and the outliers, drawn on `device` from a generator seeded with `seed`.

    A CUDA generator and a CPU one give different numbers for one seed; each is deterministic.
    """
    x = torch.empty(int(dims["rows"]), int(dims["cols"]), device=device, dtype=torch.float32)
    _draw(x, GeneratorDraws(seed, device))
    return (x.to(dtype or torch.float32),)


def refill_inputs(buffers: list[torch.Tensor], dims: Dims, draws: Draws) -> None:
    """A timed rep's input, drawn in place with make_inputs' distribution."""
    (x,) = buffers
    _draw(x, draws)


def _draw(x: torch.Tensor, draws: Draws) -> None:
    """The input, in place, in a few ops none of which waits on the GPU or costs the host much: a timed rep's refill
    runs this, and the host time of a rep is in the wall the bracket checks (reps that are host-bound show wall no
    sample explains, and honest ones were refused). Measured on the H200: index_put_(accumulate=True) sorted on CUDA
    and made the refill wait on the GPU (688 us of host a rep, 113 us without the outliers); a CUDA randperm costs 69
    us of host, a randint 13 (hence a fixed shuffle of the offsets, rotated, rather than a permutation drawn anew)."""
    rows, cols = x.shape
    draws.normal_(x, 0.0, ROW_STD)
    shuffled, ramp = _offsets(rows, x.device, x.dtype)
    shift = draws.below_(torch.empty(1, device=x.device, dtype=torch.int64), rows)
    x.add_(shuffled[ramp.add(shift).remainder_(rows)][:, None])
    # OUTLIER_EVERY's outliers: one in each block of rows, at a random row of it and a random column, the heights
    # spread evenly over the blocks.
    n = max(1, rows // OUTLIER_EVERY)
    block = rows // n
    first, heights = _outlier_blocks(n, block * cols, x.device, x.dtype)
    at = draws.below_(torch.empty(n, device=x.device, dtype=torch.int64), block * cols).add_(first)
    x.view(-1).scatter_add_(0, at, heights)


@functools.lru_cache(maxsize=16)
def _offsets(rows: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The row offsets in a fixed shuffled order, and 0..rows-1 (the rows to rotate)."""
    spread = torch.linspace(-ROW_OFFSET, ROW_OFFSET, rows, dtype=dtype)
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(rows))
    ramp = torch.arange(rows, dtype=torch.int64)
    return spread[order].to(device), ramp.to(device)


@functools.lru_cache(maxsize=16)
def _outlier_blocks(n: int, block_words: int, device: torch.device,
                    dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Each block's first flat index, and its outlier's height (the highest first)."""
    first = torch.arange(n, device=device, dtype=torch.int64) * block_words
    return first, torch.linspace(OUTLIER_HIGH, OUTLIER_LOW, n, device=device, dtype=dtype)


def flops(dims: Dims) -> float:
    return float(FLOPS_PER_ELEMENT * dims["rows"] * dims["cols"])


def bytes_moved(dims: Dims) -> float:
    """Read x once, write out once, float32."""
    return float(2 * 4 * dims["rows"] * dims["cols"])


def _torch_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


# The tolerance (rel_err 2e-5, atol 1e-7, rtol 1e-4), re-measured on the H200, 2026-12-01 (benchmarks/tolerances.py,
# 8 seeds at small and odd, 2 at bench): torch.softmax in float32 is within 6e-8 to 9e-8 of the float64 reference
# (the floor), exp2 in float32 7-8e-8, the starter 1.1e-7: each 180x or more inside rel_err and 0.004-0.006 of the
# elementwise bound. What it rejects (tests/kernels/test_problem_approximations.py), by how many times each misses the
# tolerance at the least (its worse test, over shapes and seeds): exp and sum in float16 after a float32 max, 16x
# (rel_err 3.8-4.9e-4); the output rounded to bf16, 55x (1.7-2.5e-3); rounded to float16, 3.9x (its 2^-11 relative
# rounding of an outlier row's near-one weight against rtol 1e-4; 6.8x before the outliers); the last 1/8 of each
# row dropped, 10^4x; the last row left unwritten, 10^4x. Not skipping the max subtraction either: exp() of the
# shifted rows overflows; nor shifting by the row's first element or the max of its first half: the outlier rows
# overflow (2026-12-01, with the outliers; CPU, float64 reference: the starter and torch.softmax stay at 6-9e-8).
PROBLEM = Problem(
    name="softmax",
    summary="Row softmax of a (rows, cols) float32 tensor: the warm-up, bandwidth-bound.",
    description=DESCRIPTION,
    shapes={
        "bench": {"rows": 4096, "cols": 8192},
        "small": {"rows": 67, "cols": 129},
        "odd": {"rows": 3, "cols": 1000},
    },
    make_inputs=make_inputs,
    refill_inputs=refill_inputs,
    reference=reference,
    tolerance=Tolerance(rel_err=2e-5, atol=1e-7, rtol=1e-4),
    flops=flops,
    bytes=bytes_moved,
    output_names=("out",),
    gpu_dtype=torch.float32,
    cpu_dtype=torch.float32,
    baselines=(
        Baseline(name="torch", fn=_torch_softmax, description="torch.softmax(x, dim=-1), eager"),
    ),
    check_shapes=("small", "odd"),
)
