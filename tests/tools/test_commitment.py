"""Fresh inputs in every timed rep, and the outputs' commitment, on the CPU timed protocol (`cpu_timing`).

Two properties the judge's verdict rests on, tried against candidates that patch their own harness (it runs in
their process): no timed rep sees input values seen before, and a rep's outputs cannot be written after the
judge has named the reps it checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernels import starter_path

STARTER = starter_path("softmax").read_text()
Profile = Callable[[str], dict[str, Any]]  # conftest.cpu_timed




# Wrong on purpose whenever an input repeats one seen before (keyed on four sampled values, read through a
# strided view, no compute): every call must therefore see new values for the verdict to stay correct.
ZEROS_ON_REPEAT = '''
_SEEN_KEYS = set()


def _key(x):
    step = max(1, (x.numel() - 1) // 3)
    return (tuple(x.shape), *torch.as_strided(x, (4,), (step,)).tolist())
'''


def test_no_timed_rep_sees_inputs_seen_before(cpu_timed: Profile) -> None:
    src = STARTER.replace("def entry(", ZEROS_ON_REPEAT + "\n\ndef entry(", 1)
    src = src.replace("    rows, cols = x.shape\n", "    k = _key(x)\n    if k in _SEEN_KEYS:\n"
                      "        return torch.zeros_like(x)\n    _SEEN_KEYS.add(k)\n    rows, cols = x.shape\n", 1)
    assert src.count("_SEEN_KEYS") == 3
    r = cpu_timed(src)
    assert r["correct"] is True, (r["error_class"], r["error"])
    # Every rep was checked (small outputs), so not one of the 30 timed reps saw a repeated input.
    assert r["verification"]["bounds"]["checked_reps"] == r["timing"]["reps"] == 30


# A patched harness whose reps run a stand-in that returns garbage; it keeps the batch's seeds.
LAZY_BATCH = '''
import torch as _torch

_Host = _torch.sys.modules["tools.candidate_host"].Host
_problems = _torch.sys.modules["kernels"]
_batch, _fetch = _Host.batch, _Host.fetch


def _lazy_batch(self, msg):
    seeds = [int(s) for s in msg.header.get("seeds", [])]
    if not seeds:
        return _batch(self, msg)
    real, self.entry = self.entry, (lambda *inputs: _torch.empty_like(inputs[0]))
    try:
        answer = _batch(self, msg)
    finally:
        self.entry = real
    self._late_seeds = seeds
    return answer
'''

# ...and when the judge fetches the reps it checks, the patched fetch computes their right outputs (from the seeds
# it kept) and writes them into the stash before sending it.
FILL_STASH_LATE = LAZY_BATCH + '''

def _late_fetch(self, msg):
    name, shape = self.rep_recipe
    problem = _problems.get_problem(name)
    for j in [int(s) for s in msg.header.get("slots", [])]:
        problem.refill(self.buffers, shape, self._late_seeds[j])
        for slot, out in zip(self.stash[j], self._outputs(self.entry(*self.buffers))):
            slot.copy_(out)
    return _fetch(self, msg)


_Host.batch, _Host.fetch = _lazy_batch, _late_fetch
'''


def test_outputs_written_after_the_batch_break_their_commitment(cpu_timed: Profile) -> None:
    r = cpu_timed(FILL_STASH_LATE + STARTER)
    assert r["correct"] is False and r["error_class"] == "timing_mismatch", (r["error_class"], r["error"])
    assert "committed" in r["error"]


@pytest.mark.parametrize(("field", "named"), [("commits", "commitment"), ("keys", "keys")])
def test_a_patched_harness_that_drops_a_part_of_its_answer_is_a_protocol_error(cpu_timed: Profile, field: str,
                                                                              named: str) -> None:
    """The digests of a batch's outputs, and the keys its reps drew the next ones from (test_chained_reps.py)."""
    src = (f'''
import torch as _torch

_Host = _torch.sys.modules["tools.candidate_host"].Host
_batch = _Host.batch


def _dropped(self, msg):
    answer = _batch(self, msg)
    answer.pop({field!r}, None)
    return answer


_Host.batch = _dropped
''' + STARTER)
    r = cpu_timed(src)
    assert r["correct"] is False and r["error_class"] == "protocol_error", (r["error_class"], r["error"])
    assert named in r["error"]


# The reps run a stand-in, and the batch commits to the setup call's outputs, the only real ones it has; when the
# judge fetches the reps it checks, the patched fetch computes their right outputs and moves tiny elements (sign
# flips, then magnitudes below 4e-8, all inside the 1e-7 atol) until they meet that commitment. Against a sum of
# the outputs' bit patterns (the commitment before it was a digest) every forged rep met its commitment and only the
# bracket refused the profile, for the stand-in's samples; on a GPU a stand-in padded to its samples passes that.
FORGE_COMMITMENT = LAZY_BATCH + '''
_timing = _torch.sys.modules["tools.timing"]
_setup = _Host.time_setup
_TINY = 4e-8
_TINY_BITS = int(_torch.tensor([_TINY]).view(_torch.int32)[0])


def _forge(out, target):
    bits = out.view(_torch.int32).reshape(-1)
    flat = out.reshape(-1)
    tiny = (flat.abs() < _TINY).nonzero().flatten().tolist()
    def gap():
        return target - int(bits.long().sum())
    for t in tiny:
        if gap() >= 0:
            break
        if flat[t] >= 0:
            flat[t] = -flat[t] if flat[t] != 0 else -1e-45
    for t in tiny:
        d = gap()
        if d <= 0:
            break
        if flat[t] >= 0:
            bits[t] += min(d, _TINY_BITS - int(bits[t]))
    return gap() == 0


def _setup_and_keep(self, msg):
    answer = _setup(self, msg)
    outs = self._outputs(self.entry(*self.buffers))
    self._target = _timing.committed(outs, self.cuda).digests
    return answer


def _committing_batch(self, msg):
    answer = _lazy_batch(self, msg)
    if msg.header.get("seeds"):
        answer["commits"] = [list(self._target) for _ in self._late_seeds]
    return answer


def _forging_fetch(self, msg):
    name, shape = self.rep_recipe
    problem = _problems.get_problem(name)
    for j in [int(s) for s in msg.header.get("slots", [])]:
        problem.refill(self.buffers, shape, self._late_seeds[j])
        outs = [o.clone() for o in self._outputs(self.entry(*self.buffers))]
        if all(isinstance(t, int) for t in self._target):
            for o, t in zip(outs, self._target):
                _forge(o, t)
        for slot, out in zip(self.stash[j], outs):
            slot.copy_(out)
    return _fetch(self, msg)


_Host.time_setup, _Host.batch, _Host.fetch = _setup_and_keep, _committing_batch, _forging_fetch
'''


def test_outputs_moved_inside_the_tolerance_to_meet_a_commitment_are_refused(cpu_timed: Profile) -> None:
    r = cpu_timed(FORGE_COMMITMENT + STARTER)
    assert r["correct"] is False and r["error_class"] == "timing_mismatch", (r["error_class"], r["error"])
    assert "committed" in r["error"]
