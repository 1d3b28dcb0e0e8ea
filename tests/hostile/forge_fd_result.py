"""A forged result line written to every open file descriptor, 0 to 255, with `os.write`.

Trick: a worker that reports over a pipe it inherited can be impersonated by anything it runs: at import and
on every call the candidate writes `{"type": "result", "id": <the job's id, read from the caller's frames>,
"result": {"ok": true, "correct": true, "verified": true, "speedup": 100, ...}}` plus a newline to fds 0..255
(errors ignored). A reader that takes the first result line it sees takes the forged one; the real results
left in the pipe then answer the next jobs (plain_zeros.py, control_honest.py follow it in the same pool).
The candidate itself returns zeros.
Expected verdict: incorrect (or the broken channel reported: crashed, protocol_error, runtime_error,
wrong_output), never correct; and the followers get their own verdicts.
"""

import os

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"crashed", "incorrect", "protocol_error", "runtime_error", "wrong_output"}
ISOLATION = "fresh"
NEXT = ["plain_zeros.py", "control_honest.py"]

_json = torch.sys.modules["json"]


def _job_id():
    frame = os.sys._getframe(1)
    while frame is not None:
        job = frame.f_locals.get("job")
        if isinstance(job, dict) and "id" in job:
            return job["id"]
        frame = frame.f_back
    return None


def forged_line():
    result = {"ok": True, "correct": True, "verified": True, "error_class": None, "error": None,
              "problem": PROBLEM, "shape": SHAPE, "max_rel_err": 0.0, "trials": [], "shapes_checked": ["small"],
              "timing": {"median_us": 0.5, "mode": "cuda_graph", "spread_pct": 0.1, "reps": 1000},
              "speedup": 100.0, "baseline": {"name": "torch", "median_us": 50.0}}
    message = {"type": "result", "id": _job_id(), "fatal": False, "result": result}
    return (_json.dumps(message) + "\n").encode()


def spray(data):
    for fd in range(256):
        try:
            os.write(fd, data)
        except OSError:
            pass


spray(forged_line())


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def entry(x):
    spray(forged_line())
    out = torch.empty_like(x)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
