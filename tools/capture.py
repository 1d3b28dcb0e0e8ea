"""Record which Triton kernels a candidate launches, with what arguments, without a GPU.

Runs as its own process under TRITON_INTERPRET=1 (`python -m tools.capture REQUEST.json RESULT.json`):
`entry()` is called on CPU inputs of the requested shape in the GPU dtype, and every launch is
intercepted and recorded (kernel, argument kinds, scalar and constexpr values, num_warps,
num_stages) instead of executed, so capture is fast even at the benchmark shape. The launches are
compiled for sm_90 in a second process (tools.aot), because triton.language takes its interpreter
mode at import and one process cannot do both.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tools.candidate import CandidateError, describe_exception, gluon_jit_class, load_candidate

LAUNCH_OPTION_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "launch_cooperative_grid",
                      "launch_pdl")


def _describe_arg(value: Any) -> dict[str, Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return {"kind": "tensor", "dtype": str(value.dtype).removeprefix("torch."),
                "aligned16": value.data_ptr() % 16 == 0}
    if value is None:
        return {"kind": "none"}
    if isinstance(value, bool):
        return {"kind": "bool", "value": value}
    if isinstance(value, int):
        return {"kind": "int", "value": value}
    if isinstance(value, float):
        return {"kind": "float", "value": value}
    if isinstance(value, str):  # a constexpr option, e.g. input_precision="tf32x3"
        return {"kind": "str", "value": value}
    described = _describe_tensor_descriptor(value) or describe_gluon_layout(value)
    if described is not None:
        return described
    import triton.language as tl

    if isinstance(value, tl.dtype):  # a dtype passed as a constexpr
        return {"kind": "tl_dtype", "value": value.name}
    if hasattr(value, "dtype") and hasattr(value, "value"):  # tl.constexpr
        return _describe_arg(value.value)
    text = repr(value)
    return {"kind": "other", "repr": text[:200]}


# Host-side TMA descriptors a kernel may take: Triton's, and Gluon's for Hopper (which carries its shared layout).
TENSOR_DESCRIPTOR_CLASSES = ("triton.tools.tensor_descriptor.TensorDescriptor",
                             "triton.experimental.gluon.nvidia.hopper.TensorDescriptor")


def _describe_tensor_descriptor(value: Any) -> dict[str, Any] | None:
    """A host-side tensor descriptor: what compiling against it needs (its class, dtype, block shape, strides,
    shared layout), not its memory."""
    cls = type(value)
    name = f"{cls.__module__}.{cls.__qualname__}"
    if name not in TENSOR_DESCRIPTOR_CLASSES:
        return None
    out: dict[str, Any] = {
        "kind": "tensor_descriptor", "class": name, "dtype": str(value.base.dtype).removeprefix("torch."),
        "aligned16": value.base.data_ptr() % 16 == 0, "shape": [int(n) for n in value.shape],
        "strides": [int(n) for n in value.strides], "block_shape": [int(n) for n in value.block_shape],
        "padding": value.padding,
    }
    layout = getattr(value, "layout", None)
    if layout is not None:
        out["layout"] = describe_gluon_layout(layout)
    return out


GLUON_LAYOUT_MODULES = "triton.experimental.gluon.language"  # Gluon's layout classes live below this package


def describe_gluon_layout(value: Any) -> dict[str, Any] | None:
    """A Gluon layout (a frozen dataclass: BlockedLayout, SliceLayout of a parent, NVMMASharedLayout, ...) as
    plain data, so a kernel that takes one as a constexpr can be compiled in another process."""
    import dataclasses

    cls = type(value)
    if not dataclasses.is_dataclass(value) or not cls.__module__.startswith(GLUON_LAYOUT_MODULES):
        return None

    def plain(v: Any) -> Any:
        nested = describe_gluon_layout(v)
        if nested is not None:
            return nested
        if isinstance(v, (list, tuple)):
            return {"kind": type(v).__name__, "items": [plain(x) for x in v]}
        return v

    return {"kind": "gluon_layout", "class": f"{cls.__module__}.{cls.__qualname__}",
            "fields": {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}}


def capture_launches(candidate_path: Path, problem_name: str, shape: str) -> dict[str, Any]:
    import triton  # noqa: F401  (imported under the interpreter)
    from triton.runtime import interpreter

    from kernels import get_problem

    problem = get_problem(problem_name)
    launches: list[dict[str, Any]] = []
    seen: set[str] = set()
    original_run = interpreter.InterpretedFunction.run

    def recording_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        fn = self.fn
        names = self.arg_names
        bound = dict(zip(names, args))
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in LAUNCH_OPTION_KEYS}
        bound.update(kwargs)
        record = {
            "kernel": fn.__name__,
            "qualname": getattr(fn, "__qualname__", fn.__name__),
            "module": getattr(fn, "__module__", ""),
            "args": {name: _describe_arg(bound[name]) for name in names if name in bound},
            "options": options,
            "grid": _describe_grid(grid, bound),
        }
        key = json.dumps([record["kernel"], record["args"], record["options"]], sort_keys=True)
        if key not in seen:
            seen.add(key)
            launches.append(record)

    # Gluon kernels are not interpreted (TRITON_INTERPRET leaves @gluon.jit a compiled function, whose launch
    # needs a driver): their launches are recorded the same way, through the same signature.
    gluon_class = gluon_jit_class()
    original_gluon_run = gluon_class.run if gluon_class is not None else None
    interpreter.InterpretedFunction.run = recording_run
    if gluon_class is not None:
        gluon_class.run = recording_run
    try:
        module = load_candidate(candidate_path)
        inputs = problem.inputs(shape, seed=0, device="cpu", dtype=problem.gpu_dtype)
        module.entry(*inputs)
    finally:
        interpreter.InterpretedFunction.run = original_run
        if gluon_class is not None:
            gluon_class.run = original_gluon_run
    if not launches:
        raise CandidateError("entry() launched no Triton kernel", error_class="no_kernel")
    return {"launches": launches}


def _describe_grid(grid: Any, bound: dict[str, Any]) -> list[int] | None:
    try:
        g = grid(bound) if callable(grid) else grid
        return [int(x) for x in (g if isinstance(g, (tuple, list)) else (g,))]
    except Exception:
        return None


def main(argv: list[str]) -> int:
    from tools.sandbox import confine

    request = json.loads(Path(argv[0]).read_text())
    out_path = Path(argv[1])
    path = Path(request["candidate_path"])
    os.chdir(out_path.parent)  # started elsewhere (tools.compiler): its folder, for the candidate's own files
    confine(out_path.parent, cuda=False)  # the candidate's code runs below: it may write only here
    try:
        result = {"ok": True, **capture_launches(path, request["problem"], request["shape"])}
    except CandidateError as exc:
        result = {"ok": False, "error": {"type": "CandidateError", "message": exc.message,
                                         "line": exc.line, "error_class": exc.error_class}}
    except BaseException as exc:  # the candidate's fault, reported with its line
        result = {"ok": False, "error": {**describe_exception(exc, path), "error_class": "capture_error"}}
    out_path.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("tools.capture must run with TRITON_INTERPRET=1", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
