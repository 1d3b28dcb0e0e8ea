"""A helper process started at import, alive while the candidate is checked and timed.

Trick: at import the candidate forks a child that waits, detached into a session of its own. On a GPU such a
child, started with a scrubbed environment, escapes Nsight's injection, and fed the candidate's inputs through CUDA
IPC it can run torch or a library while the candidate's own process launches only its Triton kernels: the census
sees honest kernels and the timed reps' outputs are right. Here the child only waits (the detection is what is
tested: any process of the candidate's alive while it is judged), and the kernel is honest.
Expected verdict: rejected (the judge finds a process below the zygote besides the candidate's own).
"""

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"rejected"}
ISOLATION = "shared"

_os = torch.sys.modules["os"]
_time = torch.sys.modules["time"]

if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        while True:
            _time.sleep(0.05)
    _os._exit(0)


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
