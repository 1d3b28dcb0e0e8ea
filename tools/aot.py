"""Compile captured launches ahead of time for Hopper, with no GPU needed, and read their resources.

Runs as its own process (no interpreter): `python -m tools.aot REQUEST.json RESULT.json`. For each
launch recorded by tools.capture it rebuilds Triton's own argument specialisation (dtypes, 16-byte
alignment, integer divisibility) from stand-in arguments, compiles for the target, and reads
registers, spills and shared memory with the cuobjdump that ships inside Triton, and whether the SASS
uses wgmma (HGMMA) and TMA (UTMALDG/UTMASTG, UBLKCP).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.candidate import describe_exception, gluon_jit_class, jit_functions, load_candidate
from tools.sass_lines import disassemble, instruction_mix
from tools.triton_bin import nvidia_binary

TARGET_ARCH = 90
# The most shared memory one block may use on sm_90 (227 KiB, cudaDevAttrMaxSharedMemoryPerBlockOptin);
# a kernel that needs more compiles but fails at launch with "out of resource: shared memory".
MAX_SHARED_BYTES = 232448
_RES_RE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def _stand_in(desc: dict[str, Any]) -> Any:
    import torch

    kind = desc["kind"]
    if kind == "tensor":
        dtype = getattr(torch, desc["dtype"])
        base = torch.empty(64, dtype=dtype)
        if desc.get("aligned16", True):
            return base
        return base[1:]  # an element offset breaks 16-byte alignment as the original view did
    if kind in ("int", "float", "bool", "str"):
        return desc["value"]
    if kind == "tl_dtype":
        import triton.language as tl

        return tl.dtype(desc["value"])  # its name, e.g. "fp32", "bf16"
    if kind == "none":
        return None
    if kind == "tensor_descriptor":
        return _descriptor_stand_in(desc)
    if kind == "gluon_layout":
        return _gluon_layout(desc)
    raise ValueError(f"cannot compile an argument of kind {kind!r} ({desc.get('repr', '')})")


def _descriptor_stand_in(desc: dict[str, Any]) -> Any:
    """A tensor descriptor of the recorded class, dtype, shape, strides and block over a small stand-in base:
    compiling reads only those, never the memory."""
    import importlib

    from tools.capture import TENSOR_DESCRIPTOR_CLASSES

    if desc["class"] not in TENSOR_DESCRIPTOR_CLASSES:
        raise ValueError(f"cannot compile against a tensor descriptor of class {desc['class']}")
    module_name, _, class_name = desc["class"].rpartition(".")
    cls = getattr(importlib.import_module(module_name), class_name)
    base = _stand_in({"kind": "tensor", "dtype": desc["dtype"], "aligned16": desc["aligned16"]})
    fields: dict[str, Any] = {"base": base, "shape": desc["shape"], "strides": desc["strides"],
                              "block_shape": desc["block_shape"], "padding": desc["padding"]}
    if desc.get("layout") is not None:
        fields["layout"] = _gluon_layout(desc["layout"])
    return cls(**fields)


def _gluon_layout(desc: dict[str, Any]) -> Any:
    """The Gluon layout tools.capture.describe_gluon_layout described, rebuilt (nested layouts too)."""
    import importlib

    from tools.capture import GLUON_LAYOUT_MODULES

    module_name, _, class_name = desc["class"].rpartition(".")
    if not module_name.startswith(GLUON_LAYOUT_MODULES):
        raise ValueError(f"cannot compile against a layout of class {desc['class']}")

    def value(v: Any) -> Any:
        if isinstance(v, dict) and v.get("kind") == "gluon_layout":
            return _gluon_layout(v)
        if isinstance(v, dict) and v.get("kind") in ("list", "tuple"):
            items = [value(x) for x in v["items"]]
            return tuple(items) if v["kind"] == "tuple" else items
        return v

    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(**{name: value(v) for name, v in desc["fields"].items()})


def _find_kernel(module: Any, record: dict[str, Any]) -> Any:
    """The JITFunction behind a recorded launch."""
    for fn in jit_functions(module):
        if fn.fn.__name__ == record["kernel"]:
            return fn
    raise LookupError(f"kernel {record['kernel']!r} is not a module-level @triton.jit function of the candidate")


def compile_launch(module: Any, record: dict[str, Any], want_asm: bool, lines_from: Path | None = None,
                   top_lines: int = 20) -> dict[str, Any]:
    """Compile one recorded launch for sm_90 and read its resources; with `lines_from` (the candidate's path),
    also its instruction mix by source line."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = _find_kernel(module, record)
    target = GPUTarget("cuda", TARGET_ARCH, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    args = {name: _stand_in(desc) for name, desc in record["args"].items()}
    kwargs = dict(record.get("options", {}))
    kwargs["debug"] = False
    bound_args, specialization, _ = binder(**args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound_args, specialization, kwargs)
    source_class = ASTSource
    gluon_class = gluon_jit_class()
    if gluon_class is not None and isinstance(fn, gluon_class):
        from triton.experimental.gluon._runtime import GluonASTSource

        source_class = GluonASTSource
    compiled = triton.compile(source_class(fn, signature, constexprs, attrs), target=target,
                              options=options.__dict__)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        report = _resources(cubin, want_asm)
        lines = _lines(cubin, lines_from, top_lines) if lines_from is not None else None
    meta = compiled.metadata
    constexpr_values = {name: desc.get("value") for name, desc in record["args"].items()
                        if signature.get(name) == "constexpr"}
    result = {
        "name": record["kernel"],
        "signature": {k: v for k, v in signature.items() if v != "constexpr"},
        "constexprs": constexpr_values,
        "num_warps": meta.num_warps,
        "num_stages": meta.num_stages,
        "num_ctas": getattr(meta, "num_ctas", 1),
        "shared_bytes": max(int(meta.shared), report["shared_bytes"]),
        "grid": record.get("grid"),
        **{k: v for k, v in report.items() if k != "shared_bytes"},
    }
    if want_asm:
        result["ptx"] = compiled.asm.get("ptx")
        result["ttgir"] = compiled.asm.get("ttgir")
    if lines is not None:
        result["lines"] = lines
    return result


def _lines(cubin: Path, candidate: Path, top: int) -> list[dict[str, Any]]:
    return instruction_mix(disassemble(cubin), str(candidate), candidate.read_text(), top)


def _resources(cubin: Path, want_asm: bool) -> dict[str, Any]:
    tool = nvidia_binary("cuobjdump")
    res = subprocess.run([str(tool), "-res-usage", str(cubin)], capture_output=True, text=True, check=True)
    sass = subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    m = _RES_RE.search(res.stdout)
    if not m:
        raise RuntimeError(f"could not read resource usage from cuobjdump: {res.stdout[:500]}")
    regs, stack, shared, local = (int(x) for x in m.groups())
    out: dict[str, Any] = {
        "registers": regs,
        "stack_bytes": stack,
        # Register spills land in the stack frame (a Triton kernel makes no calls that would need one)
        # or in local memory: per-thread bytes of both, and the SASS's local stores and loads.
        "spill_bytes": stack + local,
        "spill_instructions": len(re.findall(r"\b(?:STL|LDL)(?:\.\S+)?\s", sass)),
        "shared_bytes": shared,
        "uses_wgmma": "HGMMA" in sass or "QGMMA" in sass or "IGMMA" in sass,
        "uses_tma": any(op in sass for op in ("UTMALDG", "UTMASTG", "UBLKCP", "UTMAPF")),
        "sass_instructions": sum(1 for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line)),
    }
    if want_asm:
        out["sass"] = sass
    return out


def _shared_memory_error(kernel: str, shared: int) -> dict[str, Any]:
    """What the launch on a GPU would say, found before any GPU is involved."""
    return {"kernel": kernel, "error_class": "compile_error", "type": "OutOfResources", "line": None,
            "message": f"out of resource: {kernel} needs {shared} B of shared memory; sm_{TARGET_ARCH} allows "
                       f"{MAX_SHARED_BYTES} B per block (use fewer stages or smaller tiles)"}


def main(argv: list[str]) -> int:
    from tools.sandbox import confine

    request = json.loads(Path(argv[0]).read_text())
    out_path = Path(argv[1])
    path = Path(request["candidate_path"])
    os.chdir(out_path.parent)  # started elsewhere (tools.compiler): its folder, for the candidate's own files
    confine(out_path.parent, cuda=False)  # importing the candidate runs its module code: it may write only here
    kernels: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    try:
        module = load_candidate(path)
    except BaseException as exc:
        errors.append({**describe_exception(exc, path), "error_class": "import_error"})
        module = None
    if module is not None:
        for record in request["launches"]:
            try:
                kernel = compile_launch(module, record, request.get("want_asm", False),
                                        path if request.get("want_lines") else None)
                kernels.append(kernel)
                if kernel["shared_bytes"] > MAX_SHARED_BYTES:
                    errors.append(_shared_memory_error(record["kernel"], kernel["shared_bytes"]))
            except BaseException as exc:
                errors.append({**describe_exception(exc, path, module=module), "kernel": record["kernel"],
                               "error_class": "compile_error"})
    out_path.write_text(json.dumps({"ok": not errors, "kernels": kernels, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
