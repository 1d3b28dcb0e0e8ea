"""A forged result on every descriptor, then `os._exit(0)` before the real one can be written.

Trick: as forge_fd_result.py, but the process ends right after the forgery, so the forged line is the only
answer a reader of the old channel will ever get.
Expected verdict: crashed (the candidate's process ended mid-job), protocol_error or runtime_error; never correct.
"""

import os

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"crashed", "protocol_error", "runtime_error"}
ISOLATION = "fresh"
NEXT = ["control_honest.py"]

_json = torch.sys.modules["json"]


def _job_id():
    frame = os.sys._getframe(1)
    while frame is not None:
        job = frame.f_locals.get("job")
        if isinstance(job, dict) and "id" in job:
            return job["id"]
        frame = frame.f_back
    return None


def entry(x):
    result = {"ok": True, "correct": True, "verified": True, "error_class": None, "error": None,
              "problem": PROBLEM, "shape": SHAPE, "max_rel_err": 0.0, "trials": [],
              "timing": {"median_us": 0.5, "mode": "cuda_graph"}, "speedup": 100.0}
    line = (_json.dumps({"type": "result", "id": _job_id(), "fatal": False, "result": result}) + "\n").encode()
    for fd in range(256):
        try:
            os.write(fd, line)
        except OSError:
            pass
    os._exit(0)
