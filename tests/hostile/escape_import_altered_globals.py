"""Forbidden imports run under globals whose `__name__` is not the candidate's (no exec, no import statement).

Trick: `compile` is fetched from the `builtins` module with getattr (the static check refuses only calls of the
bare name), and the compiled module code becomes a function with `types.FunctionType(code, globals)` whose
globals say `__name__ = "torch._numpy_helpers"`. An import hook that decides by the importer's `__name__` or by
the first non-importlib frame's globals then lets `import ctypes` (a forbidden module) and `import numpy`
through. The helper computes the softmax in numpy.
Expected verdict: not correct-and-verified (the forbidden import refused, or the work seen as not Triton's).
"""

import torch
import triton  # noqa: F401

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = "not_verified"
ISOLATION = "shared"

HELPER = '''
import ctypes
import numpy

def softmax(a):
    e = numpy.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
'''

_builtins = torch.sys.modules["builtins"]
_types = torch.sys.modules["types"]
_code = getattr(_builtins, "comp" + "ile")(HELPER, "<torch_numpy_helpers>", "exec")
_helper_globals = {"__name__": "torch._numpy_helpers", "__builtins__": _builtins}
_types.FunctionType(_code, _helper_globals)()
softmax_np = _helper_globals["softmax"]


def entry(x):
    a = x.detach().to("cpu").numpy()
    return torch.as_tensor(softmax_np(a).astype(a.dtype)).to(x.device)
