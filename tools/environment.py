"""Process environments for the subprocesses that run candidate code. Standard library only."""

from __future__ import annotations

import os
import re
from pathlib import Path

# Variables that carry credentials never reach candidate code.
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)", re.IGNORECASE)
_KEEP = {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "CUDA_VISIBLE_DEVICES",
         "TRITON_CACHE_DIR", "TRITON_INTERPRET", "TRITON_HOME", "CUDA_HOME", "LD_LIBRARY_PATH",
         "VIRTUAL_ENV", "MARATHON_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "OMP_NUM_THREADS",
         "NVIDIA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "FLA_FLASH_KDA", "TORCHINDUCTOR_CACHE_DIR",
         "CC", "CXX", "TMP", "TEMP", "USER", "TERM", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
         "MARATHON_DIAG_PROFILE", "MARATHON_TRITON_DRAWS"}


def project_root() -> Path:
    return Path(__file__).resolve().parent.parent


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment without credentials: only a known-harmless set of variables."""
    env = {k: v for k, v in os.environ.items()
           if (k in _KEEP or k.startswith(("TRITON_", "CUDA_", "NCCL_", "TORCH_")))
           and not _SECRET.search(k)}
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env
