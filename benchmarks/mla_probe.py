"""Where the MLA split kernel's time goes at B = 1: the same program with its phases added one at a time.

    python benchmarks/mla_probe.py [--shape bench]

Each variant is `mla_split_kernel`'s grid and launch constants with only some of its work: PHASE 0 stores
one float a program (the launch), 1 loads q, 2 loads q and the cache tile, 3 adds the Q.K product and the
softmax, 4 adds the P.V product (storing a row sum of acc, not the partial), 5 is the whole split kernel
(the 64 x 512 partial stored); `store` writes only a partial's worth of zeros. Timed two ways: warm
(`do_bench_cudagraph`, launches back to back) and as the profile tool times (one graph replay a rep, L2
flushed before each, `tools.timing.Timer`). Differences between consecutive phases are each phase's cost
on the critical path, not its cost alone: the compiler schedules each variant as a whole. `2 x phase 0` is
two launches of the empty program (the floor of any two-kernel design), `combine` the solution's second
kernel alone on phase 5's partials.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent


@triton.jit
def probe_kernel(q_ptr, kv_ptr, part_ptr, lse_ptr, S, tokens_per_split, num_splits, qk_scale,
                 stride_qh, stride_kvs, PHASE: tl.constexpr, STORE_ONLY: tl.constexpr,
                 D_LATENT: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr):
    split = tl.program_id(0)
    heads = tl.arange(0, BLOCK_H)
    offs_c = tl.arange(0, D_LATENT)
    offs_r = tl.arange(0, D_ROPE)
    offs_n = tl.arange(0, BLOCK_N)
    row = heads * num_splits + split
    if STORE_ONLY:
        zeros = tl.zeros([BLOCK_H, D_LATENT], dtype=part_ptr.dtype.element_ty)
        tl.store(part_ptr + row[:, None] * D_LATENT + offs_c[None, :], zeros)
        return
    if PHASE == 0:
        tl.store(lse_ptr + row, tl.zeros([BLOCK_H], dtype=tl.float32))
        return
    q_nope = tl.load(q_ptr + heads[:, None] * stride_qh + offs_c[None, :])
    q_rope = tl.load(q_ptr + heads[:, None] * stride_qh + D_LATENT + offs_r[None, :])
    if PHASE == 1:
        tl.store(lse_ptr + row, tl.sum(q_nope.to(tl.float32), axis=1) + tl.sum(q_rope.to(tl.float32), axis=1))
        return
    m_i = tl.full([BLOCK_H], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, D_LATENT], dtype=tl.float32)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, S)
    for n0 in range(start, end, BLOCK_N):
        tok = n0 + offs_n
        valid = tok < end
        rows = kv_ptr + tok[:, None] * stride_kvs
        c_kv = tl.load(rows + offs_c[None, :], mask=valid[:, None], other=0.0)
        k_rope = tl.load(rows + D_LATENT + offs_r[None, :], mask=valid[:, None], other=0.0)
        if PHASE == 2:
            l_i += tl.sum(q_nope.to(tl.float32), axis=1) + tl.sum(q_rope.to(tl.float32), axis=1)
            l_i += tl.sum(tl.sum(c_kv.to(tl.float32), axis=1), axis=0) + tl.sum(tl.sum(k_rope.to(tl.float32), axis=1),
                                                                              axis=0)
        else:
            s = tl.dot(q_nope, tl.trans(c_kv))
            s = tl.dot(q_rope, tl.trans(k_rope), s)
            s = tl.where(valid[None, :], s * qk_scale, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            if PHASE >= 4:
                acc = tl.dot(p.to(c_kv.dtype), c_kv, acc * alpha[:, None])
            m_i = m_new
    if PHASE <= 3:
        tl.store(lse_ptr + row, m_i + l_i)
    elif PHASE == 4:
        tl.store(lse_ptr + row, m_i + tl.log2(l_i) + tl.sum(acc, axis=1))
    else:
        out = acc * (1.0 / l_i)[:, None]
        tl.store(part_ptr + row[:, None] * D_LATENT + offs_c[None, :], out.to(part_ptr.dtype.element_ty))
        tl.store(lse_ptr + row, m_i + tl.log2(l_i))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="bench")
    args = ap.parse_args()

    import torch
    from triton.testing import do_bench_cudagraph

    from kernels.mla_decode import solution as sol
    from kernels.mla_decode.problem import D_LATENT, PROBLEM
    from tools.timing import Timer

    q, kv = PROBLEM.inputs(args.shape, 0, "cuda")
    B, H, S = q.shape[0], q.shape[1], kv.shape[1]
    assert B == 1 and H == sol.BLOCK_H, "the probe is for one batch element and one head group"
    tokens, splits = sol.split_plan(B, H, S, torch.cuda.get_device_properties(0).multi_processor_count)
    part = torch.empty((H, splits, D_LATENT), dtype=q.dtype, device="cuda")
    lse = torch.empty((H, splits), dtype=torch.float32, device="cuda")
    print(f"{args.shape}: {splits} splits of {tokens} tokens, BLOCK_N {sol.BLOCK_N}, {sol.NUM_WARPS} warps")

    def variant(phase: int, store_only: bool = False):
        def run() -> None:
            probe_kernel[(splits,)](q, kv, part, lse, S, tokens, splits, sol.SOFTMAX_SCALE * sol.LOG2E,
                                    q.stride(1), kv.stride(1), PHASE=phase, STORE_ONLY=store_only,
                                    D_LATENT=D_LATENT, D_ROPE=sol.D_ROPE, BLOCK_H=sol.BLOCK_H,
                                    BLOCK_N=sol.BLOCK_N, num_warps=sol.NUM_WARPS, num_stages=sol.NUM_STAGES)
        return run

    out = torch.empty((B, H, D_LATENT), dtype=q.dtype, device="cuda")

    def combine() -> None:
        sol.mla_combine_kernel[(H, D_LATENT // sol.COMBINE_BLOCK_D)](
            part, lse, out, H, splits, out.stride(0), out.stride(1), D_LATENT=D_LATENT,
            BLOCK_D=sol.COMBINE_BLOCK_D, BLOCK_S=triton.next_power_of_2(splits), num_warps=4)

    empty = variant(0)
    fns = {f"phase {p}": variant(p) for p in range(6)}
    fns["store only"] = variant(5, store_only=True)
    fns["2 x phase 0"] = lambda: (empty(), empty())
    fns["combine"] = combine
    fns["solution"] = lambda: sol.entry(q, kv)
    timer = Timer()
    cold = timer.measure(fns, graph=True, budget_s=3.0)
    print(f"{'variant':>12} {'warm us':>9} {'cold us':>9} {'cold IQR%':>9}")
    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        warm = do_bench_cudagraph(fn, rep=200, return_mode="median") * 1e3
        c = cold[name]
        print(f"{name:>12} {warm:9.2f} {c['median_us']:9.2f} {c['spread_pct']:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
