"""Test set-up shared by every test module.

Without a GPU the Triton interpreter runs kernels on the CPU; it must be chosen before triton is
imported anywhere, so it is set here, at collection time. Each test gets its own MARATHON_HOME so
no test reads another's event log.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

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


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("marathon_home")
    monkeypatch.setenv("MARATHON_HOME", str(home))
    return home


@pytest.fixture
def marathon_home(_isolated_home: Path) -> Path:
    return _isolated_home


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
