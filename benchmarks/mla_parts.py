"""The MLA solution's two kernels timed apart, on a GPU (warm L2, `triton.testing.do_bench_cudagraph`).

    python benchmarks/mla_parts.py [--shape bench]            # solution, torch, split kernel, combine kernel
    ncu --section SpeedOfLight ... python benchmarks/mla_parts.py --just-run   # six calls of entry(), for ncu

The profile tool times the whole entry() with a cold L2; this says which of the two kernels the time is in.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="bench")
    ap.add_argument("--file", default=str(ROOT / "kernels" / "mla_decode" / "solution.py"))
    ap.add_argument("--just-run", action="store_true", help="call entry() six times and exit (for ncu)")
    args = ap.parse_args()

    import torch
    import triton
    from triton.testing import do_bench_cudagraph

    from kernels.mla_decode.problem import D_LATENT, PROBLEM, torch_mla

    spec = importlib.util.spec_from_file_location("mla_solution", args.file)
    assert spec is not None and spec.loader is not None
    sol = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol)
    q, kv = PROBLEM.inputs(args.shape, 0, "cuda")
    if args.just_run:
        for _ in range(6):
            sol.entry(q, kv)
        torch.cuda.synchronize()
        return 0

    B, H, S = q.shape[0], q.shape[1], kv.shape[1]
    tokens, splits = sol.split_plan(B, H, S, torch.cuda.get_device_properties(0).multi_processor_count)
    print(f"{args.shape}: {splits} splits of {tokens} tokens")
    part = torch.empty((B, H, splits, D_LATENT), dtype=torch.float32, device="cuda")
    lse = torch.empty((B, H, splits), dtype=torch.float32, device="cuda")
    out = torch.empty((B, H, D_LATENT), dtype=q.dtype, device="cuda")

    def split() -> None:
        sol.mla_split_kernel[(splits, B * triton.cdiv(H, sol.BLOCK_H))](
            q, kv, part, lse, out, S, H, tokens, splits, sol.SOFTMAX_SCALE * sol.LOG2E,
            q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), out.stride(0), out.stride(1),
            D_LATENT=D_LATENT, D_ROPE=sol.D_ROPE, BLOCK_H=sol.BLOCK_H, BLOCK_N=sol.BLOCK_N, DIRECT_OUT=False,
            num_warps=sol.NUM_WARPS, num_stages=sol.NUM_STAGES)

    def combine() -> None:
        sol.mla_combine_kernel[(B * H, D_LATENT // sol.COMBINE_BLOCK_D)](
            part, lse, out, H, splits, out.stride(0), out.stride(1), D_LATENT=D_LATENT,
            BLOCK_D=sol.COMBINE_BLOCK_D, BLOCK_S=triton.next_power_of_2(splits), num_warps=4)

    for name, fn in (("solution", lambda: sol.entry(q, kv)), ("torch", lambda: torch_mla(q, kv)),
                     ("split kernel", split), ("combine kernel", combine)):
        fn()
        torch.cuda.synchronize()
        print(f"{name:>15}: {do_bench_cudagraph(fn, rep=200) * 1e3:8.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
