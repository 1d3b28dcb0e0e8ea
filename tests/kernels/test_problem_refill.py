"""Problem.refill, the inputs of a timed rep: the judge and the candidate's process must draw the same values
from one seed (the judge's references depend on it), new values for every seed, in the inputs' distribution."""

from __future__ import annotations

import pytest
import torch

from kernels import get_problem, list_problems


@pytest.mark.parametrize("name", [p.name for p in list_problems()])
def test_refill_is_deterministic_per_seed_and_new_per_seed(name: str) -> None:
    problem = get_problem(name)
    base = problem.inputs("small", 1, "cpu")
    a = [x.clone() if isinstance(x, torch.Tensor) else x for x in base]
    b = [x.clone() if isinstance(x, torch.Tensor) else x for x in base]
    problem.refill(a, "small", 123)
    problem.refill(b, "small", 123)
    tensors = [(x, y, z) for x, y, z in zip(a, b, base) if isinstance(x, torch.Tensor)]
    assert tensors and all(torch.equal(x, y) for x, y, _ in tensors)
    # Another seed gives other values in every input that the seed draws (a fixed input may stay as it was).
    problem.refill(b, "small", 124)
    assert any(not torch.equal(x, y) for x, y, _ in tensors)
    assert all(x.shape == z.shape and x.dtype == z.dtype for x, _, z in tensors)


@pytest.mark.parametrize("name", ["softmax", "mla_decode"])
def test_in_place_refills_keep_make_inputs_distribution(name: str) -> None:
    """The recipes that draw in place (not make_inputs' values) must draw from its distribution."""
    problem = get_problem(name)
    assert problem.refill_inputs is not None
    made = problem.inputs("bench" if name == "mla_decode" else "small", 5, "cpu")
    refilled = [x.clone() for x in made]
    problem.refill(refilled, "bench" if name == "mla_decode" else "small", 6)
    for m, r in zip(made, refilled):
        m64, r64 = m.double(), r.double()
        assert abs(m64.mean() - r64.mean()) < 0.05 * max(1.0, float(m64.std()))
        assert abs(float(m64.std()) / float(r64.std()) - 1) < 0.05


@pytest.mark.gpu
@pytest.mark.parametrize("name", [p.name for p in list_problems()])
def test_a_reps_refill_and_commitment_never_wait_on_the_gpu(name: str) -> None:
    """A timed rep's untimed work must only queue GPU work: an op that waits on the GPU (a softmax refill that
    indexed with index_put_(accumulate=True) did, on the H200) makes the reps host-bound, and the bracket then
    refuses honest kernels. Checked structurally: with a long spin queued ahead, the spin is still running when
    the refill and the digest of an output have returned (a wait would have outlasted it)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from tools.timing import DIGEST_WORDS, commit_outputs, gpu_spin

    problem = get_problem(name)
    for shape in problem.shapes:
        buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in problem.inputs(shape, 1, "cuda")]
        out = next(x for x in buffers if isinstance(x, torch.Tensor))
        row = torch.zeros((1, DIGEST_WORDS), dtype=torch.int32, device="cuda")
        problem.refill(buffers, shape, 2)  # first calls (allocator, generator, JIT) may wait; the reps' do not
        commit_outputs([out], row, gpu=True)
        problem.refill(buffers, shape, 2, row)
        torch.cuda.synchronize()
        gpu_spin(2_000_000_000)  # about a second at the H200's highest clock
        after_spin = torch.cuda.Event()
        after_spin.record()
        problem.refill(buffers, shape, 3, row)  # as a rep draws: keyed by the digest before it, on the device
        commit_outputs([out], row, gpu=True)
        still_running = not after_spin.query()
        torch.cuda.synchronize()
        assert still_running, f"{name} at {shape}: the refill or the commitment waited for the GPU"
