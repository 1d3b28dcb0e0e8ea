"""The CUDA binary utilities that ship inside Triton (cuobjdump, nvdisasm): read a cubin with no CUDA toolkit.

Both the ahead-of-time compile (tools.aot: resources, SASS) and the line tables of the hotspots
(tools.sass_lines: nvdisasm) run them; the lookup lives here so that neither has to import the other for it.
"""

from __future__ import annotations

from pathlib import Path


def nvidia_binary(name: str) -> Path:
    """A CUDA binary utility shipped inside Triton (cuobjdump, nvdisasm): no CUDA toolkit needed."""
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
