"""Honesty checks: a candidate implements its algorithm in Triton, not through a kernel library or torch.

Two layers. The static check (AST) catches honest mistakes early with a pointed message and a line.
The run-time layer is authoritative: an import hook refuses kernel libraries however they are reached,
and a TorchDispatchMode around `entry()` sees every aten op the candidate runs (whether it came from
`torch.matmul`, `getattr(torch, name)` or a tensor method) and refuses compute while letting
allocation, views and copies through. Standard library at import; torch only inside the run-time layer.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib.abc
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tools.candidate import CANDIDATE_MODULE_PREFIX

# Top-level modules a candidate may not import: kernel libraries and other ways around Triton.
FORBIDDEN_MODULES = frozenset({
    "fla", "flash_attn", "flash_attn_interface", "flashinfer", "flash_mla", "xformers", "deep_gemm",
    "flash_kda", "apex", "liger_kernel", "transformer_engine", "cutlass", "cuda", "cupy", "numba",
    "tilelang", "thunderkittens", "vllm", "sglang", "sageattention", "jax", "tensorflow", "ctypes",
    "cffi", "torch_tensorrt", "tensorrt", "bitsandbytes", "mamba_ssm", "causal_conv1d", "natten",
})
# Sub-modules of allowed packages that would hand the work to something other than Triton.
FORBIDDEN_SUBMODULES = frozenset({
    "torch.utils.cpp_extension", "torch._inductor", "torch._dynamo", "torch.compiler",
    "torch.backends.cudnn", "torch.cuda.jiterator", "triton.testing",
})
# Allowed top-level imports (anything else is refused statically with a clear reason).
ALLOWED_MODULES = frozenset({
    "triton", "torch", "math", "functools", "itertools", "typing", "dataclasses", "os", "__future__",
    "collections", "operator", "enum",
})
# torch.<name> calls that allocate, view or describe; every other torch call is treated as compute.
TORCH_ALLOWED_CALLS = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "tensor", "as_tensor", "as_strided", "is_tensor", "device", "Size", "finfo",
    "iinfo", "get_default_dtype", "is_floating_point", "numel", "broadcast_shapes", "cuda", "Generator",
})
# Method names that are compute when called on a tensor (the static check cannot see types, so it
# only refuses names that are unambiguous; the run-time layer catches the rest).
TENSOR_COMPUTE_METHODS = frozenset({
    "matmul", "mm", "bmm", "einsum", "softmax", "log_softmax", "exp", "exp2", "log", "sigmoid", "tanh",
    "relu", "norm", "cumsum", "cumprod", "logsumexp", "baddbmm", "addmm", "addbmm", "mean",
    "scaled_dot_product_attention", "linear", "conv1d", "conv2d", "normalize", "layer_norm", "rms_norm",
    "triangular_solve", "solve_triangular", "inverse", "cholesky", "silu", "gelu", "softplus",
})
FORBIDDEN_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "breakpoint"})

# aten ops a candidate may run: allocation, views, copies, fills, metadata. Everything else is compute.
ATEN_ALLOWED = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill", "fill_",
    "zero_", "arange", "scalar_tensor", "lift_fresh", "lift_fresh_copy", "_local_scalar_dense",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "as_strided_", "expand",
    "permute", "transpose", "t", "squeeze", "unsqueeze", "select", "slice", "narrow", "split",
    "split_with_sizes", "unbind", "chunk", "alias", "detach", "flatten", "unflatten", "view_as",
    "contiguous", "clone", "copy_", "_to_copy", "to", "_copy_from", "_copy_from_and_resize",
    "resize_", "set_", "is_nonzero", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "record_stream", "is_same_size", "item", "_has_compatible_shallow_copy_type", "result_type",
    "_pin_memory", "is_pinned", "empty_permuted", "stride", "size", "dim", "numel",
    "view_as_real", "view_as_complex", "movedim", "swapaxes", "diagonal", "indices", "values",
})


@dataclass(frozen=True)
class Violation:
    """Why a candidate was refused, and where."""

    message: str
    line: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"message": self.message, "line": self.line}


class GuardRejection(Exception):
    def __init__(self, violations: list[Violation]) -> None:
        self.violations = violations
        super().__init__("; ".join(v.message for v in violations))


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _StaticChecker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.torch_aliases: set[str] = {"torch"}
        self.functional_aliases: set[str] = set()
        # Names bound to Triton's modules (tl, gl for Gluon's language, ...): their calls are not torch compute.
        self.triton_aliases: set[str] = {"tl", "triton", "math", "libdevice"}
        self.in_kernel = 0
        self.kernels: set[str] = set()  # functions Triton compiles (@triton.jit, @gluon.jit, their wrappers)

    def _refuse(self, message: str, node: ast.AST) -> None:
        self.violations.append(Violation(message, getattr(node, "lineno", None)))

    def _check_module(self, name: str, node: ast.AST) -> None:
        top = name.split(".")[0]
        if top in FORBIDDEN_MODULES:
            self._refuse(f"import of '{name}' is not allowed: candidates implement the kernel in Triton, "
                         "without kernel libraries", node)
        elif any(name == s or name.startswith(s + ".") for s in FORBIDDEN_SUBMODULES):
            self._refuse(f"import of '{name}' is not allowed: it hands the work to something other "
                         "than Triton", node)
        elif top not in ALLOWED_MODULES:
            self._refuse(f"import of '{name}' is not allowed (allowed: {', '.join(sorted(ALLOWED_MODULES))})",
                         node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(alias.name, node)
            if alias.name.split(".")[0] == "triton":
                self.triton_aliases.add(alias.asname or "triton")
            if alias.name == "torch":
                self.torch_aliases.add(alias.asname or "torch")
            if alias.name == "torch.nn.functional" and alias.asname:
                self.functional_aliases.add(alias.asname)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self._refuse("relative imports are not allowed in a candidate", node)
            return
        self._check_module(module, node)
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if module.split(".")[0] == "triton" and (alias.name.islower() or alias.name == "jit"):
                self.triton_aliases.add(alias.asname or alias.name)  # a module (language, gluon, tma) or jit
            self._check_module(full, node) if module in {"torch", "torch.nn"} else None
            if full == "torch.nn.functional":
                self.functional_aliases.add(alias.asname or alias.name)
            if module == "torch" and alias.name not in TORCH_ALLOWED_CALLS and alias.name[0].islower() \
                    and alias.name not in {"nn", "float32", "float16", "bfloat16", "int32", "int64", "dtype"}:
                self._refuse(f"'from torch import {alias.name}': torch compute is not allowed in a "
                             "candidate; write it in Triton", node)

    def _is_triton_jit(self, decorator: ast.expr) -> bool:
        """@triton.jit, its autotune/heuristics wrappers, Gluon's @gluon.jit: code Triton compiles, named
        through a module imported from triton (or `jit` itself)."""
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        dotted = _dotted(target) or ""
        return dotted.endswith(("jit", "autotune", "heuristics")) and dotted.split(".")[0] in self.triton_aliases

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        kernel = any(self._is_triton_jit(d) for d in node.decorator_list)
        if kernel:
            self.kernels.add(node.name)
        self.in_kernel += kernel
        self.generic_visit(node)
        self.in_kernel -= kernel

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self.in_kernel:
            self._refuse("the '@' operator runs a torch matmul: write the product in Triton (tl.dot)", node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_BUILTINS:
            self._refuse(f"'{node.func.id}()' is not allowed in a candidate (code must be plain source)", node)
        dotted = _dotted(node.func)
        if dotted and not self.in_kernel:
            head, _, rest = dotted.partition(".")
            if dotted.startswith("importlib"):
                self._refuse("dynamic imports (importlib) are not allowed in a candidate", node)
            elif head in self.torch_aliases and rest:
                first = rest.split(".")[0]
                if rest.startswith("nn.functional") or first in {"nn", "linalg", "special", "fft", "ops"}:
                    self._refuse(f"'{dotted}()' is torch compute: write it in Triton", node)
                elif first not in TORCH_ALLOWED_CALLS and not first[:1].isupper():
                    self._refuse(f"'{dotted}()' is torch compute: write it in Triton "
                                 "(allocation and views such as torch.empty are fine)", node)
            elif head in self.functional_aliases:
                self._refuse(f"'{dotted}()' is torch compute: write it in Triton", node)
            elif isinstance(node.func, ast.Attribute) and node.func.attr in TENSOR_COMPUTE_METHODS \
                    and head not in self.triton_aliases:
                self._refuse(f"'.{node.func.attr}()' runs torch compute: write it in Triton", node)
        self.generic_visit(node)


def static_check(source: str, filename: str = "<candidate>") -> list[Violation]:
    """Refusals found by reading the source. A syntax error is reported as one violation."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        return [Violation(f"SyntaxError: {exc.msg}", exc.lineno)]
    checker = _StaticChecker()
    checker.visit(tree)
    defines_entry = any(isinstance(n, ast.FunctionDef) and n.name == "entry" for n in tree.body)
    if not defines_entry:
        checker.violations.append(Violation("the candidate defines no top-level function `entry(*inputs)`",
                                            None))
    return checker.violations


def kernel_names(source: str) -> set[str]:
    """Names of the functions the source has Triton (or Gluon) compile, read through the same decorator rules as
    the static check: what a kernel census may find running under the candidate's own names."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    checker = _StaticChecker()
    checker.visit(tree)
    return checker.kernels


# ---------------------------------------------------------------------------------------------------
# Run-time layer (used inside the worker)


def _is_forbidden(name: str) -> bool:
    return name.split(".")[0] in FORBIDDEN_MODULES or any(
        name == s or name.startswith(s + ".") for s in FORBIDDEN_SUBMODULES)


def _imported_by_candidate() -> bool:
    """Whether the code that asked for this import (the first frame outside importlib) is the candidate's."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith("<frozen") or "importlib" in filename or filename == __file__):
            return str(frame.f_globals.get("__name__", "")).startswith(CANDIDATE_MODULE_PREFIX)
        frame = frame.f_back  # type: ignore[assignment]
    return False


class _ForbiddenImportFinder(importlib.abc.MetaPathFinder):
    """Catches imports that bypass `import` statements (importlib) while candidate code runs."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if _is_forbidden(fullname) and _imported_by_candidate():
            raise ImportError(f"import of '{fullname}' is refused: candidates may not use kernel libraries")
        return None


@contextlib.contextmanager
def import_guard() -> Iterator[None]:
    """Refuse forbidden modules imported by candidate code, cached ones included.

    Judged by the importer: torch and triton may still import their own internals lazily while a
    candidate runs; an `import` statement in the candidate (seen through `__import__`, which gets
    the importer's globals) or an importlib call with a candidate frame on the stack may not.
    """
    original = builtins.__import__

    def guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                       level: int = 0) -> Any:
        importer = str((globals or {}).get("__name__", ""))
        if importer.startswith(CANDIDATE_MODULE_PREFIX):
            names = [name] + [f"{name}.{f}" for f in (fromlist or ()) if isinstance(f, str)]
            bad = next((n for n in names if _is_forbidden(n)), None)
            if bad is not None:
                raise ImportError(f"import of '{bad}' is refused: candidates implement the kernel in Triton, "
                                  "without kernel libraries")
        return original(name, globals, locals, fromlist, level)

    finder = _ForbiddenImportFinder()
    builtins.__import__ = guarded_import
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        builtins.__import__ = original


class TorchComputeRefused(RuntimeError):
    pass


def _make_dispatch_guard() -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class ComputeGuard(TorchDispatchMode):
        """Lets allocation, views and copies through; refuses aten compute ops."""

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = func._schema.name.split("::")[-1]
            if name not in ATEN_ALLOWED:
                raise TorchComputeRefused(
                    f"torch op aten::{name} called by the candidate: torch compute is not allowed, "
                    "write it in Triton (allocation, views and copies are fine)")
            return func(*args, **(kwargs or {}))

    return ComputeGuard


@contextlib.contextmanager
def compute_guard(enabled: bool = True) -> Iterator[None]:
    """Run the enclosed candidate code under the aten compute refusal (and the stream ban)."""
    if not enabled:
        yield
        return
    import torch

    mode_cls = _make_dispatch_guard()
    original_stream = torch.cuda.Stream

    def _no_streams(*_a: Any, **_k: Any) -> Any:
        raise TorchComputeRefused("creating CUDA streams is not allowed in a candidate: work on a side "
                                  "stream would escape the timer")

    torch.cuda.Stream = _no_streams  # type: ignore[assignment,misc]
    try:
        with mode_cls():
            yield
    finally:
        torch.cuda.Stream = original_stream  # type: ignore[misc]


@contextlib.contextmanager
def candidate_guard(enabled: bool = True) -> Iterator[None]:
    """Both run-time layers at once: what every guarded call of candidate code runs under."""
    if not enabled:
        yield
        return
    with import_guard(), compute_guard():
        yield
