"""Loading starters and edited copies of them as real kernels, for the problem tests."""

from __future__ import annotations

import importlib.util
import os
import uuid
from pathlib import Path
from types import ModuleType

import pytest

from kernels import starter_path

interpreted = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="runs Triton kernels on CPU tensors: needs TRITON_INTERPRET=1",
)


def load_candidate(path: Path) -> ModuleType:
    """Import a candidate file as a fresh module (Triton's JIT needs it on disk to read its source)."""
    spec = importlib.util.spec_from_file_location(f"candidate_{uuid.uuid4().hex}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def starter_variant(problem: str, tmp_path: Path, old: str, new: str) -> ModuleType:
    """The starter with one piece of source replaced: a plausible bug, as a real kernel."""
    source = starter_path(problem).read_text()
    assert old in source, f"the starter no longer contains {old!r}: update this test's bug"
    path = tmp_path / "variant.py"
    path.write_text(source.replace(old, new))
    return load_candidate(path)


def configured_variant(path: Path, folder: Path, **config: object) -> ModuleType:
    """A kernel file with module-level constants set (the tuner's rewrite), loaded as a real kernel."""
    from client.tuner import rewrite

    out = folder / f"variant_{uuid.uuid4().hex[:8]}.py"
    out.write_text(rewrite(path.read_text(), config))
    return load_candidate(out)
