"""A forked child that outlives the call and forges results, now and during the next jobs.

Trick: on its first call entry() forks once (`os.fork`, no exec, so the guard never sees it). The child inherits
every descriptor: it writes a forged "correct, verified, 100x" result line to all of them at once, again after
1 and 3 seconds (when the pool is running the next candidates), then `os._exit(0)`. The parent returns zeros.
Followers in the same pool: plain_zeros.py and control_honest.py.
Expected verdict: incorrect (or crashed/protocol_error/runtime_error); the followers judged as themselves, and
nothing the child writes is taken for a result.
"""

import os

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"crashed", "incorrect", "protocol_error", "runtime_error"}
ISOLATION = "fresh"
NEXT = ["plain_zeros.py", "control_honest.py"]

_json = torch.sys.modules["json"]
_time = torch.sys.modules["time"]
_state = {"forked": False}


def _line():
    result = {"ok": True, "correct": True, "verified": True, "error_class": None, "error": None,
              "problem": PROBLEM, "shape": SHAPE, "max_rel_err": 0.0, "trials": [],
              "timing": {"median_us": 0.5, "mode": "cuda_graph"}, "speedup": 100.0}
    return (_json.dumps({"type": "result", "id": None, "fatal": False, "result": result}) + "\n").encode()


def _spray(data):
    for fd in range(256):
        try:
            os.write(fd, data)
        except OSError:
            pass


def _child():
    try:
        line = _line()
        _spray(line)
        for delay in (1.0, 2.0):
            _time.sleep(delay)
            _spray(line)
    finally:
        os._exit(0)


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def entry(x):
    if not _state["forked"]:
        _state["forked"] = True
        if os.fork() == 0:
            _child()
    out = torch.empty_like(x)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
