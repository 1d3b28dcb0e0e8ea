"""Check the KDA solution at the small check shapes in bf16, for each seed, with module constants set.

    PYTHONPATH=. python benchmarks/kda_check_small.py [--set NAME=VALUE ...] [--shape odd] [--seeds 4]
                                                      [--dims B=1,T=200,H=2,K=64,V=64,init=1]

From the project root with it on PYTHONPATH: the tolerance rule is the KDA tests' own (`within`).

Prints each output's relative error and whether it is within the problem's tolerance; exits 1 if any is not.
For a fault that only shows at one shape and launch configuration (run it under compute-sanitizer).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kda_parts import load_solution  # the sibling script: run as a script, this folder is on sys.path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default=str(ROOT / "kernels" / "kda" / "solution.py"))
    ap.add_argument("--set", action="append", default=[], help="NAME=value: a module constant of the solution")
    ap.add_argument("--shape", action="append", default=[], help="repeatable (default small and odd)")
    ap.add_argument("--dims", action="append", default=[], help="B=..,T=..,H=..,K=..,V=..,init=..: a shape by size")
    ap.add_argument("--seeds", type=int, default=4)
    args = ap.parse_args()

    import torch

    from kernels.kda.problem import PROBLEM, make_inputs
    from tests.kernels.test_problem_kda import within

    sol = load_solution(Path(args.file), args.set)
    bad = 0
    shapes: list[tuple[str, dict[str, int]]] = [(name, PROBLEM.dims(name)) for name in args.shape]
    for text in args.dims:
        shapes.append((text, {k: int(v) for k, v in (item.split("=") for item in text.split(","))}))
    for shape, dims in shapes or [(name, PROBLEM.dims(name)) for name in ("small", "odd")]:
        for seed in range(args.seeds):
            inputs = make_inputs(dims, seed, "cuda", torch.bfloat16)
            out = sol.entry(*inputs)
            torch.cuda.synchronize()
            ref = PROBLEM.reference(*inputs)
            for name, o, r in zip(PROBLEM.output_names, out, ref):
                ok, err = within(o, r, PROBLEM.tolerance_for(name))
                bad += not ok
                print(f"{shape} seed {seed} {name}: rel_err {err:.2e} {'ok' if ok else 'OUT OF TOLERANCE'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
