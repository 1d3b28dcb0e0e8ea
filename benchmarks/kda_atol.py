"""How much absolute tolerance bf16 chunked KDA kernels need, over seeds, at given shapes (on a GPU).

    python benchmarks/kda_atol.py odd small mid        # SEEDS=12 by default

For the solution and, where installed, FLA's chunk_kda: the atol each needs at the problem's rtol
(max over elements of |o - ref| - rtol |ref|), its maximum and median (the upper middle value) over
seeds, and the relative error. This is what the kda problem's output tolerance was calibrated from.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(shapes: list[str]) -> int:
    from kernels.kda.problem import PROBLEM

    spec = importlib.util.spec_from_file_location("kda_solution", ROOT / "kernels" / "kda" / "solution.py")
    assert spec is not None and spec.loader is not None
    sol = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol)
    fla = PROBLEM.baseline("fla_chunk_kda")
    fns = {"solution": sol.entry}
    if fla.available() is None:
        fns["fla"] = fla.fn
    rtol = PROBLEM.tolerance.rtol
    for shape in shapes or ["odd"]:
        for name, fn in fns.items():
            need, rels = [], []
            for seed in range(int(os.environ.get("SEEDS", "12"))):
                inputs = PROBLEM.inputs(shape, seed, "cuda")
                o, r = fn(*inputs)[0].double(), PROBLEM.reference(*inputs)[0].double()
                need.append(float(((o - r).abs() - rtol * r.abs()).max()))
                rels.append(float((o - r).norm() / r.norm()))
            print(f"{shape} {name}: o needs atol max {max(need):.2e} median {sorted(need)[len(need) // 2]:.2e}; "
                  f"rel_err max {max(rels):.2e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
