"""Every timed rep of a batch served by one stacked call, with the keys the reps' inputs were drawn from.

Trick: a batch's seeds arrive together. The candidate rewrites its harness's batch (it runs in the candidate's
process) so that it draws all of the batch's inputs at once, runs its kernel once over all their rows (softmax
is row by row), commits to each rep's slice and reports an equal share of the call's time for each rep. One
call over k reps' rows costs far less than k calls where a single rep cannot fill the machine, so every rep
looks faster than it is, and the bracket sees a wall that adds up. Drawing a rep's inputs before the rep before
it has run means drawing them without that rep's key, so the keys it reports are the ones it drew from (none),
not the ones its outputs give.
Expected verdict: timing_mismatch (the checked reps' outputs do not give the keys reported), or incorrect
(a rep drawn without the key of the rep before it has other inputs than the judge draws).
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect", "timing_mismatch"}
ISOLATION = "shared"
JOB = {"cpu_timing": True, "budget_s": 0.05}

_Host = torch.sys.modules["tools.candidate_host"].Host
_timing = torch.sys.modules["tools.timing"]
_draws = torch.sys.modules["kernels.draws"]
_problems = torch.sys.modules["kernels"]
_time = torch.sys.modules["time"]
_batch = _Host.batch


@triton.jit
def softmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


def entry(x):
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
    return out


def _stacked_batch(self, msg):
    seeds = [int(s) for s in msg.header.get("seeds", [])]
    if not seeds:
        return _batch(self, msg)
    problem = _problems.get_problem(self.rep_recipe[0])
    (x,) = self.buffers
    rows = x.shape[0]
    stack = torch.empty((len(seeds) * rows, x.shape[1]), dtype=x.dtype, device=x.device)
    for j, seed in enumerate(seeds):
        problem.refill(self.buffers, self.rep_recipe[1], seed)
        stack[j * rows:(j + 1) * rows].copy_(x)
    self._sync()
    t0 = _time.perf_counter()
    outs = entry(stack).split(rows)
    self._sync()
    share_us = (_time.perf_counter() - t0) * 1e6 / len(seeds)
    commits = torch.zeros((len(seeds), 1, _timing.DIGEST_WORDS), dtype=torch.int32, device=x.device)
    for j, out in enumerate(outs):
        out = out.contiguous()
        _timing.commit_outputs((out,), commits[j], gpu=self.cuda)
        self._stash_slot(j, (out,))
    self._sync()
    drawn_from = _draws.key_hex(torch.zeros((1, _draws.KEY_WORDS), dtype=torch.int32))
    return {"ok": True, "us": [share_us] * len(seeds), "commits": _timing.sealed(commits).digests,
            "keys": [drawn_from] * len(seeds)}


_Host.batch = _stacked_batch
