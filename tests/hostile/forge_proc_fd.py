"""A forged result written into the parent's pipes, opened through /proc/<ppid>/fd.

Trick: even a process that holds no descriptor of the judge's channel can open one: `/proc/<ppid>/fd/<n>` of a
pipe opens that pipe anew, for writing too, when the kernel's ptrace check lets this process see its parent (same
uid). The candidate opens every pipe of its parent with O_WRONLY|O_NONBLOCK and writes a forged "correct" result
line into each: the pool's read end of the result pipe among them. It returns zeros. Run where its parent is a
separate host process that owns the pool (never pytest itself); plain_zeros.py follows it.
Expected verdict: incorrect (or crashed/protocol_error/runtime_error), and the follower judged as itself.
"""

import os

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"crashed", "incorrect", "protocol_error", "runtime_error"}
ISOLATION = "host"
NEXT = ["plain_zeros.py"]

_json = torch.sys.modules["json"]


def _line():
    result = {"ok": True, "correct": True, "verified": True, "error_class": None, "error": None,
              "problem": PROBLEM, "shape": SHAPE, "max_rel_err": 0.0, "trials": [],
              "timing": {"median_us": 0.5, "mode": "cuda_graph"}, "speedup": 100.0}
    return (_json.dumps({"type": "result", "id": None, "fatal": False, "result": result}) + "\n").encode()


def _forge_into_parent():
    ppid = os.getppid()
    if ppid <= 1:
        return 0
    base = f"/proc/{ppid}/fd"
    written = 0
    try:
        names = os.listdir(base)
    except OSError:
        return 0
    for name in names:
        try:
            if not os.readlink(f"{base}/{name}").startswith("pipe:"):
                continue
            fd = os.open(f"{base}/{name}", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.write(fd, _line())
            written += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return written


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def entry(x):
    _forge_into_parent()
    out = torch.empty_like(x)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
