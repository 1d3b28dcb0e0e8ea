"""Loading a candidate kernel file as a module, and pointing errors back at its lines.

A candidate travels as text (MCP) or a path (CLI); either way it is written to a file named after its
content hash so Triton (which reads source through `inspect`) and tracebacks see real line numbers.
Standard library only at import (the worker imports this); the Triton-aware helpers import Triton when
called.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import sys
import traceback
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CANDIDATE_MODULE_PREFIX = "marathon_candidate_"


def source_sha(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def write_candidate(source: str, directory: Path) -> Path:
    """Write `source` to `directory/cand_<sha12>.py` (idempotent) and return the path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"cand_{source_sha(source)[:12]}.py"
    if not path.exists() or path.read_text(encoding="utf-8") != source:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(source, encoding="utf-8")
        tmp.replace(path)
    return path


def load_candidate(path: Path) -> types.ModuleType:
    """Import the candidate file as a fresh module; it must define a callable `entry`."""
    name = CANDIDATE_MODULE_PREFIX + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton's @jit looks functions' globals up through their module
    spec.loader.exec_module(module)
    entry = getattr(module, "entry", None)
    if not callable(entry):
        raise CandidateError("the candidate defines no function `entry(*inputs)`", line=None)
    return module


class CandidateError(Exception):
    """A fault in the candidate itself, with the line of its source it points at."""

    def __init__(self, message: str, line: int | None = None, error_class: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.error_class = error_class


def candidate_line(exc: BaseException, candidate_file: str | Path) -> int | None:
    """The innermost line of the candidate's file in the exception's traceback (or SyntaxError)."""
    target = str(candidate_file)
    if isinstance(exc, SyntaxError) and exc.filename == target:
        return exc.lineno
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == target:
            line = frame.lineno
    return line


def jit_error_line(exc: BaseException, module: types.ModuleType | None,
                   candidate_file: str | Path | None = None) -> int | None:
    """The file line of a Triton CompilationError, whose own position is relative to its function's `def`.

    The function is found among the module's @triton.jit functions or, without a module (an error raised at a
    launch inside the worker), by its source text in the candidate file."""
    node, src = getattr(exc, "node", None), getattr(exc, "src", None)
    lineno = getattr(node, "lineno", None)
    if lineno is None or not isinstance(src, str):
        return None
    for fn in jit_functions(module) if module is not None else ():
        if fn.src == src:
            raw = "".join(getattr(fn, "raw_src", []))
            decorator_lines = raw[: raw.find("def ")].count("\n") if "def " in raw else 0
            return int(fn.starting_line_number) + decorator_lines + int(lineno) - 1
    if candidate_file is not None and src:
        try:
            text = Path(candidate_file).read_text(encoding="utf-8")
        except OSError:
            return None
        at = text.find(src)
        if at >= 0 and text.find(src, at + 1) < 0:
            return text.count("\n", 0, at) + int(lineno)
    return None


def jit_functions(module: types.ModuleType) -> list[Any]:
    """The module-level @triton.jit and @gluon.jit functions of a loaded candidate (kernels and helpers),
    unwrapping autotune/heuristics wrappers."""
    from triton.runtime.jit import JITFunction

    found = []
    for value in vars(module).values():
        fn = value
        while not isinstance(fn, JITFunction) and hasattr(fn, "fn"):
            fn = fn.fn
        if isinstance(fn, JITFunction):
            found.append(fn)
    return found


def gluon_jit_class() -> Any:
    """The class of @gluon.jit functions, or None where this Triton has no Gluon (an experimental API)."""
    try:
        from triton.experimental.gluon._runtime import GluonJITFunction
    except ImportError:
        return None
    return GluonJITFunction


class GluonNeedsGpu(RuntimeError):
    """A @gluon.jit kernel was launched where candidates are checked under the Triton interpreter."""

    def __init__(self, kernel: str) -> None:
        super().__init__(f"the Gluon kernel {kernel} was launched without a GPU")
        self.kernel = kernel


@contextlib.contextmanager
def gluon_launches_refused() -> Iterator[None]:
    """Inside it, launching a @gluon.jit kernel (`kernel[grid](...)`, behind autotune/heuristics wrappers too)
    raises GluonNeedsGpu: the interpreter cannot run Gluon (it leaves such a kernel a compiled function, whose
    launch needs a driver). Refusing the launch, not the definition, lets a candidate that keeps Triton kernels
    for machines without a GPU be checked there."""
    gluon_class = gluon_jit_class()
    if gluon_class is None:
        yield
        return
    from triton.runtime.jit import KernelInterface

    original = KernelInterface.__getitem__

    def launcher(self: Any, grid: Any) -> Any:
        fn = self
        while not isinstance(fn, gluon_class) and hasattr(fn, "fn"):
            fn = fn.fn
        if isinstance(fn, gluon_class):
            name = fn.fn.__name__

            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise GluonNeedsGpu(name)

            return refuse
        return original(self, grid)

    KernelInterface.__getitem__ = launcher
    try:
        yield
    finally:
        KernelInterface.__getitem__ = original


def compilation_chain(exc: BaseException) -> list[BaseException]:
    """A Triton CompilationError and those it was raised from, outermost first.

    A fault inside a @triton.jit helper surfaces as one CompilationError a call level, each pointing at its
    call site; only the innermost says what is wrong."""
    chain = [exc]
    while True:
        cause = chain[-1].__cause__
        if cause is None or cause in chain or not _is_compilation_error(cause):
            return chain
        chain.append(cause)


def _is_compilation_error(exc: BaseException) -> bool:
    """Triton's CompilationError or a subclass (CompileTimeAssertionFailure, UnsupportedLanguageConstruct), known
    by name: this module does not import Triton."""
    return any(cls.__name__ == "CompilationError" for cls in type(exc).__mro__)


def describe_exception(exc: BaseException, candidate_file: str | Path, limit: int = 4000,
                       module: types.ModuleType | None = None) -> dict[str, Any]:
    """A structured error: class, message and the candidate's line, no traceback of our internals.

    For a compilation error raised through helpers, the message and line are the innermost one's (the
    fault), followed by the lines of the calls that led there."""
    chain = compilation_chain(exc) if _is_compilation_error(exc) else [exc]
    inner = chain[-1]
    message = f"{type(inner).__name__}: {inner}".strip()
    if len(message) > limit:
        message = message[:limit] + f"... [{len(message) - limit} more characters]"
    line = jit_error_line(inner, module, candidate_file)
    if len(chain) > 1:
        callers = [jit_error_line(e, module, candidate_file) for e in reversed(chain[:-1])]
        message += "\ncalled from " + ", ".join(f"line {n}" if n else "a kernel" for n in callers)
        line = line or next((n for n in callers if n), None)
    line = line or candidate_line(exc, candidate_file)
    return {"type": type(inner).__name__, "message": message, "line": line}
