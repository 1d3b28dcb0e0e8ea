"""Test set-up shared by every test module.

Without a GPU the Triton interpreter runs kernels on the CPU; it must be chosen before triton is
imported anywhere, so it is set here, at collection time. Each test gets its own MARATHON_HOME so
no test reads another's event log.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _has_cuda() -> bool:
    # Cheap probe that does not initialise torch.cuda before the environment is settled.
    return shutil.which("nvidia-smi") is not None and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != ""


HAS_CUDA = _has_cuda()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# A tool result with a field its output schema does not declare fails the test (server.models.published); in
# service the field is dropped with a warning instead. Servers the tests start as subprocesses inherit it.
os.environ.setdefault("MARATHON_STRICT_RESULTS", "1")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("marathon_home")
    monkeypatch.setenv("MARATHON_HOME", str(home))
    return home


@pytest.fixture
def marathon_home(_isolated_home: Path) -> Path:
    return _isolated_home


@pytest.fixture(scope="session")
def interpreter_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One warm interpreter worker pool for the CPU timed-protocol tests: a worker's start is seconds of CI."""
    from tools.pool import WorkerPool

    with WorkerPool(gpus=[], root=tmp_path_factory.mktemp("workers")) as pool:
        pool.warm()
        yield pool


@pytest.fixture
def cpu_timed(interpreter_pool: Any) -> Callable[[str], dict[str, Any]]:
    """Profile a softmax source at `small` by the wall clock (`cpu_timing`): every step of a GPU profile's timed
    protocol, with nothing timed that means anything."""

    def profile(source: str) -> dict[str, Any]:
        return interpreter_pool.run({"op": "profile", "problem": "softmax", "shape": "small", "source": source,
                                     "cpu_timing": True, "budget_s": 0.05}, timeout=240)

    return profile


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
