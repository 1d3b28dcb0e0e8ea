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
