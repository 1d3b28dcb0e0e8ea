"""The tuner's search pieces without a run: the declared spaces of the suite's kernels, the constraint language,
the rewrite and its read-back, and the optimiser's proposals (valid, never repeated, the same from the same
history). The policy driven through the loop is in test_client_tuner.py."""

from __future__ import annotations

import random
from typing import Any

import pytest

from client.fingerprint import fingerprint
from client.search.history import PENALTY, UNTIMED, Measurement, Trial
from client.search.optimiser import Optimiser
from client.search.source import TuneSpaceError, Variants, rewrite, tune_space
from client.search.space import SearchSpace
from kernels import PROBLEMS_DIR, problem_names, solution_path, starter_path

# Candidate files kept beside a problem's solution (kind: the file's name without .py).
CANDIDATES = [("mla_decode", "one_launch")]
KERNELS = [(p, "starter") for p in problem_names()] + [(p, "solution") for p in problem_names()
                                                       if solution_path(p) is not None] + CANDIDATES


def _declared(problem: str, kind: str) -> str:
    path = {"starter": starter_path(problem), "solution": solution_path(problem)}.get(
        kind, PROBLEMS_DIR / problem / f"{kind}.py")
    assert path is not None
    return path.read_text()


def _space(problem: str, kind: str) -> tuple[SearchSpace, dict[str, Any]]:
    return SearchSpace.from_source(_declared(problem, kind))


# -- the declared spaces ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("problem", "kind"), KERNELS)
def test_every_kernel_declares_a_space_that_holds_its_own_configuration(problem: str, kind: str) -> None:
    space, current = _space(problem, kind)
    assert space.valid(current), [c.why for c in space.violated(current)]
    size, complete = space.count()
    assert complete and 1 < size <= space.raw_size
    if kind == "solution":
        assert len(space.knobs) >= 12, "a solution's search should be worth a day"
        assert size < space.raw_size, "the constraints rule nothing out"


@pytest.mark.parametrize(("problem", "kind"), [k for k in KERNELS if _space(*k)[0].constraints])
def test_every_constraint_rules_something_out(problem: str, kind: str) -> None:
    space, current = _space(problem, kind)
    rng = random.Random(0)
    samples = [space.sample(rng) for _ in range(3000)]
    for c in space.constraints:
        # one knob moved off the kernel's own configuration breaks it, or a random configuration does
        moved = [{**current, k.name: v} for k in space.knobs for v in k.choices]
        assert any(not c.holds(s) for s in samples + moved), c.why


MLA_SOLUTION_INVALID = [  # sm_90 compiles at bench: shared memory past 232448 bytes a block (tests/tools/test_compile)
    {"BLOCK_H": 64, "BLOCK_N": 64, "NUM_WARPS": 8, "NUM_STAGES": 3},
    {"BLOCK_H": 64, "BLOCK_N": 128, "NUM_WARPS": 8, "NUM_STAGES": 2},
    {"BLOCK_H": 16, "BLOCK_N": 64, "NUM_WARPS": 8, "NUM_STAGES": 4},
    {"BLOCK_H": 16, "BLOCK_N": 128, "NUM_WARPS": 8, "NUM_STAGES": 3},
    {"BLOCK_H": 64, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 2},  # the accumulator cannot live in registers
    {"GLUON_BLOCK_N": 32, "GLUON_STAGES": 5},  # not a choice
    {"GLUON_BLOCK_N": 64, "GLUON_STAGES": 3},  # 294912 bytes
    {"BLOCK_H": 32, "GLUON_STAGES": 3, "GLUON_BLOCK_N": 32},  # Gluon knobs where the Gluon kernel never runs
]
MLA_SOLUTION_VALID = [  # compiled within the limit
    {"BLOCK_H": 32, "BLOCK_N": 64, "NUM_WARPS": 8, "NUM_STAGES": 3},  # 188416 bytes
    {"BLOCK_H": 16, "BLOCK_N": 128, "NUM_WARPS": 4, "NUM_STAGES": 2},  # 169984
    {"BLOCK_H": 64, "BLOCK_N": 32, "NUM_WARPS": 8, "NUM_STAGES": 4},  # 221184
    {"BLOCK_H": 64, "BLOCK_N": 128, "NUM_WARPS": 8, "NUM_STAGES": 1},  # 221184
    {"GLUON_BLOCK_N": 32, "GLUON_STAGES": 4},  # 225320
    {"GLUON_BLOCK_N": 128, "GLUON_STAGES": 1},  # 225304
]
MLA_ONE_LAUNCH_INVALID = [  # the split kernel's limits hold for the one-launch kernel (the same split, then the merge)
    {"BLOCK_H": 64, "BLOCK_N": 64, "NUM_WARPS": 8, "NUM_STAGES": 3},
    {"BLOCK_H": 16, "BLOCK_N": 128, "NUM_WARPS": 8, "NUM_STAGES": 3},
    {"BLOCK_H": 64, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 2},  # the accumulator cannot live in registers
    {"SPLIT_WAVES": 2.0},  # not a choice: the grid would outgrow the GPU, and the two-launch path run
    {"MERGE_D": 128},  # not a choice
]
MLA_ONE_LAUNCH_VALID = [
    {"BLOCK_H": 64, "BLOCK_N": 32, "NUM_WARPS": 8, "NUM_STAGES": 4},
    {"BLOCK_H": 16, "BLOCK_N": 128, "NUM_WARPS": 4, "NUM_STAGES": 2},
    {"MERGE_H": 8, "MERGE_D": 32, "SPLIT_WAVES": 0.5},
]
KDA_SOLUTION_INVALID = [
    {"NUM_WARPS_PREP": 4, "PREP_GLUON": 0},  # not a choice: entry() refuses it
    {"AKK_BF16": 1, "INV_PRECISION": "tf32"},  # entry() refuses it
    {"USE_GLUON_SCAN": 0, "BV": 128, "NUM_STAGES": 3},  # 253952 bytes
    {"USE_GLUON_SCAN": 0, "BV": 16, "NUM_STAGES": 4},  # not a choice (241664 bytes)
    {"GLUON_SCAN_BV": 128, "GLUON_SCAN_STAGES": 3},  # 286744 bytes
    {"USE_GLUON_SCAN": 1, "BV": 64},  # the Triton scan's knobs where the Gluon scan runs
    {"PREP_GLUON": 1, "GATE_APART": 0},  # the Gluon prep forms the gate itself
    {"PREP_GLUON": 1, "GATE_APART": 1, "GATE_BK": 32},  # the gate kernel's knobs where it does not run
    # 512 threads x 168 registers > 65,536: OutOfResources on the H200 (tuner run kda-tune-h200, trial 8)
    {"PREP_GLUON": 0, "NUM_WARPS_PREP": 16, "MAXNREG_PREP_FULL": 168},
]
KDA_SOLUTION_VALID = [
    {"USE_GLUON_SCAN": 0, "BV": 64, "NUM_STAGES": 3},  # 212992 bytes
    {"USE_GLUON_SCAN": 0, "BV": 128, "NUM_STAGES": 2},  # 180224
    {"GLUON_SCAN_BV": 64, "GLUON_SCAN_STAGES": 3},  # 229400
    {"GLUON_SCAN_BV": 128, "GLUON_SCAN_STAGES": 2},  # 213008
    {"AKK_BF16": 0, "INV_PRECISION": "tf32x3"},
    {"PREP_GLUON": 0, "GATE_APART": 0, "NUM_WARPS_PREP": 16, "MAXNREG_PREP_FULL": 128},  # the Triton prep's knobs
    {"PREP_GLUON": 0, "GATE_APART": 0, "NUM_WARPS_PREP": 8, "MAXNREG_PREP_FULL": 168},
    {"PREP_GLUON": 0, "GATE_APART": 1, "GATE_BK": 32, "NUM_WARPS_GATE": 8},  # the gate kernel's
]


@pytest.mark.parametrize(("problem", "kind", "changes", "valid"),
                         [("mla_decode", "solution", c, False) for c in MLA_SOLUTION_INVALID]
                         + [("mla_decode", "solution", c, True) for c in MLA_SOLUTION_VALID]
                         + [("mla_decode", "one_launch", c, False) for c in MLA_ONE_LAUNCH_INVALID]
                         + [("mla_decode", "one_launch", c, True) for c in MLA_ONE_LAUNCH_VALID]
                         + [("kda", "solution", c, False) for c in KDA_SOLUTION_INVALID]
                         + [("kda", "solution", c, True) for c in KDA_SOLUTION_VALID])
def test_configurations_known_to_fail_are_ruled_out_and_known_good_ones_kept(problem: str, kind: str,
                                                                             changes: dict[str, Any],
                                                                             valid: bool) -> None:
    space, current = _space(problem, kind)
    assert space.valid({**current, **changes}) is valid, [c.why for c in space.violated({**current, **changes})]


# -- the constraint language ----------------------------------------------------------------------------------------


def _toy(constraints: str) -> str:
    return f'A = 1\nB = "x"\nTUNE_SPACE = {{"A": [1, 2, 4], "B": ["x", "y"]}}\nTUNE_CONSTRAINTS = {constraints}\n'


@pytest.mark.parametrize("expression", [
    "__import__('os').system('true')", "A.bit_length() > 0", "(lambda: 1)()", "A ** 2 < 9", "C > 1",
    "[x for x in (1, 2)]", "open('f')", "A[0]", "min(A, key=abs)", "globals()"])
def test_a_constraint_that_could_run_code_is_refused(expression: str) -> None:
    with pytest.raises(TuneSpaceError):
        SearchSpace.from_source(_toy(repr({"why": expression})))


def test_constraints_evaluate_numbers_only_and_fail_closed() -> None:
    space, _ = SearchSpace.from_source(_toy(repr({
        "even": "A % 2 == 0 or B == 'y'", "no string arithmetic": "B * 1000000000000 != 0 or True",
        "division by zero fails": "1 / (A - 1) > 0"})))
    assert [c.why for c in space.violated({"A": 1, "B": "x"})] == ["even", "no string arithmetic",
                                                                    "division by zero fails"]
    assert space.valid({"A": 2, "B": "x"}) is False  # B * 10**12 is refused, not computed
    assert {c.why for c in space.violated({"A": 4, "B": "y"})} == {"no string arithmetic"}


@pytest.mark.parametrize("declaration", ['{"A": []}', '{"A": [1, 1.0]}', '{"A": [[1]]}', "[1, 2]", '{"__A": [1]}'])
def test_a_malformed_space_is_refused(declaration: str) -> None:
    with pytest.raises(TuneSpaceError):
        SearchSpace.from_source(f"A = 1\n__A = 1\nTUNE_SPACE = {declaration}\n")


# -- rewriting and reading back ------------------------------------------------------------------------------------


def test_rewrite_changes_the_declared_constants_and_nothing_else() -> None:
    source = _declared("mla_decode", "starter")
    space, current = tune_space(source)
    other = {name: values[-1] if values[-1] != current[name] else values[0] for name, values in space.items()}
    out = rewrite(source, other)
    assert tune_space(out) == (space, other)
    changed = [(a, b) for a, b in zip(source.splitlines(), out.splitlines()) if a != b]
    assert len(changed) == len(space) and len(out.splitlines()) == len(source.splitlines())
    assert all(b.split("=")[0] == a.split("=")[0] for a, b in changed)  # same names, new values
    assert "# cache tokens per loop step" in out  # trailing comments kept
    assert rewrite(out, current) == source and fingerprint(out) != fingerprint(source)


@pytest.mark.parametrize(("problem", "kind"), KERNELS)
def test_the_configuration_of_a_variant_is_read_back_from_its_text(problem: str, kind: str) -> None:
    source = _declared(problem, kind)
    space, current = SearchSpace.from_source(source)
    variants = Variants(source, space.names)
    assert variants.config_of(source) == current
    rng = random.Random(1)
    for _ in range(5):
        config = space.sample(rng)
        assert variants.config_of(variants.render(config)) == config
    assert variants.config_of(source.replace("def entry(", "def entry_(", 1)) is None  # another kernel
    first = space.names[0]
    assert variants.config_of(source.replace(f"\n{first} =", f"\n{first}_OTHER =", 1)) is None  # a knob gone


# -- the optimiser -------------------------------------------------------------------------------------------------


def _objective(space: SearchSpace, config: dict[str, Any]) -> Measurement:
    key = space.key(config)
    if sum(key) % 7 == 3:
        return Measurement("compile_error")
    return Measurement("correct", median_us=10.0 + sum((i - 1) ** 2 for i in key))


@pytest.mark.parametrize(("problem", "kind"), KERNELS)
def test_proposals_are_valid_and_never_repeat(problem: str, kind: str) -> None:
    space, current = _space(problem, kind)
    optimiser = Optimiser(space, seed=3)
    trials: list[Trial] = []
    seen: set[tuple[int, ...]] = set()
    size = space.count()[0]
    for i in range(min(size, 40)):
        proposal = optimiser.propose(trials, lambda c: space.key(c) not in seen, first=current)
        assert proposal is not None
        assert space.valid(proposal.config), (proposal, [c.why for c in space.violated(proposal.config)])
        key = space.key(proposal.config)
        assert key not in seen
        if i == 0:
            assert proposal.config == current and proposal.how == "the kernel as it is"
        seen.add(key)
        trials.append(Trial(proposal.config, key, i, [_objective(space, proposal.config)]))
    if size <= 40:
        assert optimiser.propose(trials, lambda c: space.key(c) not in seen) is None  # exhausted, and proved so


@pytest.mark.parametrize(("problem", "kind"), [k for k in KERNELS if k[1] == "solution"])
def test_repairs_of_random_samples_always_satisfy_the_constraints(problem: str, kind: str) -> None:
    space, _ = _space(problem, kind)
    rng = random.Random(7)
    broken = 0
    for _ in range(300):
        sample = space.sample(rng)
        broken += not space.valid(sample)
        repaired = space.nearest(sample, lambda c: True)
        assert repaired is not None and space.valid(repaired)
        if space.valid(sample):
            assert repaired == sample
    assert broken > 100, "the samples should exercise the repair"


def test_the_same_history_gives_the_same_proposal_and_failures_are_penalised() -> None:
    space, current = _space("mla_decode", "starter")
    trials = []
    for i, config in enumerate(c for c in space.walk() if c != current):
        m = Measurement("correct", median_us=5.0 + i) if i % 3 else Measurement("timeout")
        trials.append(Trial(config, space.key(config), i, [m]))
        if i == 14:
            break
    trials.append(Trial(current, space.key(current), 15, [Measurement("correct")]))  # correct, untimed
    seen = {t.key for t in trials}
    a = Optimiser(space, seed=11).propose(trials, lambda c: space.key(c) not in seen)
    b = Optimiser(space, seed=11).propose(list(trials), lambda c: space.key(c) not in seen)
    assert a is not None and b is not None and a.config == b.config
    study = Optimiser(space, seed=11).study(trials)
    values = [t.value for t in study.trials if t.value is not None]
    assert len(values) == 16 and values.count(PENALTY) == 5 and values[-1] == UNTIMED and min(values) == 6.0
