"""KDA input distributions vs the truncated UT solve: emulations on the CPU (no GPU, no files under /work/main changed).

Usage:  python emu.py SHAPE VARIANTS SEEDS [key=value ...]
  SHAPE: small | odd | mid | bench | long (T=4096, H=2, K=128, V=32) or a dict literal
  VARIANTS: comma list from VARIANTS below (or 'all'); 'ref64' = float32 reference vs float64 reference
  cfg keys (the generator): alpha (shared per-(b,h) key direction weight, 0 = today's isotropic keys),
    conv (1 = no smoothing, 4 = a causal box filter of 4 tokens over the key noise, as Kimi's ShortConv),
    beta_mu (mean of beta's pre-sigmoid; 0 = today), beta_sd (its std; 1 = today).
Every figure is a multiple of its bound: rel = rel_err / tol.rel_err, el = max |out - ref| / (atol + rtol |ref|).
"""
from __future__ import annotations

import math
import sys
import time

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from kernels import get_problem  # noqa: E402
from kernels.kda import problem as P  # noqa: E402
from kernels.kda.reference import CHUNK, kda_gate, l2norm, recurrent_reference  # noqa: E402
from tests.kernels.test_problem_approximations import BF16, _chunks, kda_scan  # noqa: E402

torch.set_num_threads(2)
KDA = get_problem("kda")
f32 = torch.float32
LONG = {"B": 1, "T": 4096, "H": 2, "K": 128, "V": 32, "init": 0}


# ----------------------------------------------------------------------------------------------------------
# The generator: problem.make_inputs plus correlated keys and optionally higher betas.

def make_inputs(dims, seed, device="cpu", dtype=BF16, alpha=0.0, conv=1, beta_mu=0.0, beta_sd=1.0, shared_on_slow=1.0, slow_scale=P.SLOW_KEY_SCALE):
    """problem.make_inputs with keys k = alpha * m_(b,h) + box-filtered noise (before the slow-channel scale),
    beta = sigmoid(N(beta_mu, beta_sd^2)). alpha=0, conv=1, beta_mu=0, beta_sd=1 gives today's inputs bit for bit."""
    dtype = dtype or BF16
    B, T, H, K, V = (int(dims[n]) for n in ("B", "T", "H", "K", "V"))
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=f32)

    q = randn(B, T, H, K).to(dtype)
    k = randn(B, T, H, K)
    v = randn(B, T, H, V).to(dtype)
    g_raw = randn(B, T, H, K)
    beta = torch.sigmoid(randn(B, T, H) * beta_sd + beta_mu).to(dtype)
    A_log = torch.empty(H, device=device, dtype=f32).uniform_(1.0, 16.0, generator=gen).log()
    dt_bias = randn(H, K) * 0.5
    rank = torch.rand(H, K, generator=gen, device=device).argsort(dim=-1).argsort(dim=-1)
    slow = rank < max(1, round(P.SLOW_FRACTION * K))
    u = torch.rand(H, K, generator=gen, device=device)
    gamma = torch.exp(math.log(P.SLOW_G_MIN) + (math.log(P.SLOW_G_MAX) - math.log(P.SLOW_G_MIN)) * u)
    a = A_log.exp().view(H, 1)
    x_median = torch.log(gamma / 5.0) - torch.log1p(-gamma / 5.0)
    dt_bias = torch.where(slow, x_median / a, dt_bias).reshape(H * K)
    g_raw = torch.where(slow, g_raw / a, g_raw).to(dtype)
    initial_state = randn(B, H, K, V) if dims.get("init", 0) else None
    # --- new: correlated keys (drawn after everything else, so the other inputs stay as today's) ---
    if conv > 1:
        e = torch.cat([randn(B, conv - 1, H, K), k], dim=1)  # conv - 1 tokens of history before t = 0
        k = sum(e[:, j: j + T] for j in range(conv)) / math.sqrt(conv)  # unit variance per element
    if alpha:
        m = alpha * randn(B, 1, H, K)  # one direction per (batch, head), shared by all its tokens
        k = k + (m if shared_on_slow else torch.where(slow, 0.0, m))  # default: on the fast channels only
    k = torch.where(slow, k * slow_scale, k).to(dtype)
    return q, k, v, g_raw, beta, A_log, dt_bias, initial_state


def as_f32(inputs):
    return tuple(x.float() if isinstance(x, torch.Tensor) and x.dtype == BF16 else x for x in inputs)


# ----------------------------------------------------------------------------------------------------------
# The chunk-parallel part, with the solve as each kernel (or shortcut) does it.

def rnd(x, dt=BF16):
    return x.to(dt).to(f32)


def scores(q_hat, k_hat, G, bf16_operands: bool, sub=16):
    """intra_chunk_scores, optionally with the operands rounded as the solution's prep rounds them
    (k e^(G - c) and q e^(G - c) rows, k e^(c - G_j) columns, all bf16; float32 accumulation)."""
    *lead, C, K = G.shape
    ns = C // sub
    Gs = G.view(*lead, ns, sub, K)
    centre = Gs[..., :1, :]
    row = torch.exp(Gs - centre)
    col_exp = centre - G.unsqueeze(-3)
    pos = torch.arange(C)
    sub_end = (torch.arange(ns) + 1) * sub
    keep = (pos.view(1, C) < sub_end.view(ns, 1)).view(ns, C, 1)
    col = torch.where(keep, torch.exp(torch.where(keep, col_exp, 0.0)), 0.0)
    k_col = k_hat.unsqueeze(-3) * col
    q_row = q_hat.view(*lead, ns, sub, K) * row
    k_row = k_hat.view(*lead, ns, sub, K) * row
    if bf16_operands:
        k_col, q_row, k_row = rnd(k_col), rnd(q_row), rnd(k_row)
    qk = (q_row @ k_col.transpose(-1, -2)).reshape(*lead, C, C)
    kk = (k_row @ k_col.transpose(-1, -2)).reshape(*lead, C, C)
    return qk, kk


def inv_solution(akk):
    """solution.py's _inv_unit_lower_64 with INV_PRECISION='input': each of the ten products takes bf16
    operands (float32 accumulation); akk arrives in bf16 (AKK_BF16=1)."""
    C = akk.shape[-1]
    idx = torch.arange(C)
    i_, j_ = idx.view(-1, 1), idx.view(1, -1)
    eye = (i_ == j_).to(f32)
    mm = lambda a, b: rnd(a) @ rnd(b)  # noqa: E731
    diag = torch.where(i_ // 16 == j_ // 16, akk, 0.0)
    d2 = mm(diag, diag)
    d4 = mm(d2, d2)
    d8 = mm(d4, d4)
    d_inv = mm(eye - diag, eye + d2)
    d_inv = mm(d_inv, eye + d4)
    d_inv = mm(d_inv, eye + d8)
    n = mm(d_inv, akk - diag)
    n2 = mm(n, n)
    return mm(mm(eye - n, eye + n2), d_inv)


def parts(q, k, v, g_raw, beta, A_log, dt_bias, solve="exact32"):
    """Everything the scan reads. solve:
    exact32  float32 scores and solve_triangular, W and U then rounded (the tests' kda_exact_bf16)
    sol      the project's solution: bf16 score operands, Akk in bf16, the ten-product inverse in bf16
             operands, inverse and right-hand sides rounded to bf16 for W = T rhs (float32 accumulation)
    fla      FLA-like: bf16 score operands, Akk float32, the inverse in float32 (forward substitution,
             FLA_TRIL_PRECISION='ieee'), rounded to bf16, then W = T rhs as above
    neumannP (I + A)^-1 ~ sum_{m<=P} (-A)^m (float32); neumann3 = (I - A)(I + A^2)
    blockdiagB  only the BxB diagonal blocks of A solved (float32)"""
    T, K = q.shape[1], q.shape[3]
    n = -(-T // CHUNK)
    q_hat = _chunks(l2norm(q, f32) * K**-0.5, n)
    k_hat = _chunks(l2norm(k, f32), n)
    vc = _chunks(v.to(f32), n)
    bc = _chunks(beta.to(f32), n).unsqueeze(-1)
    G = _chunks(kda_gate(g_raw, A_log, dt_bias, dtype=f32), n).cumsum(-2)
    G_last = G[..., -1:, :]
    realistic = solve in ("sol", "fla")
    qk, kk = scores(q_hat, k_hat, G, bf16_operands=realistic)
    idx = torch.arange(CHUNK)
    causal = idx.view(-1, 1) >= idx.view(1, -1)
    strict = causal & (idx.view(-1, 1) != idx.view(1, -1))
    a_kk = torch.where(strict, kk, 0.0) * bc
    rhs = torch.cat([bc * k_hat * G.exp(), bc * vc], dim=-1)
    eye = torch.eye(CHUNK, dtype=f32)
    if solve == "exact32":
        wu = torch.linalg.solve_triangular(a_kk + eye, rhs, upper=False, unitriangular=True)
    elif realistic:
        if solve == "sol":
            t_inv = inv_solution(rnd(a_kk))
        else:
            t_inv = torch.linalg.solve_triangular(a_kk + eye, eye.expand_as(a_kk), upper=False, unitriangular=True)
        wu = rnd(t_inv) @ rnd(rhs)
    elif solve.startswith("neumann"):
        order = int(solve[len("neumann"):])
        term, wu = rhs, rhs
        for _ in range(order):
            term = -(a_kk @ term)
            wu = wu + term
    elif solve.startswith("blockdiag"):
        b = int(solve[len("blockdiag"):])
        blk = (idx.view(-1, 1) // b) == (idx.view(1, -1) // b)
        wu = torch.linalg.solve_triangular(torch.where(blk, a_kk, 0.0) + eye, rhs, upper=False, unitriangular=True)
    else:
        raise ValueError(solve)
    return {"W": wu[..., :K], "U": wu[..., K:], "Qg": q_hat * G.exp(),
            "KdT": (k_hat * (G_last - G).exp()).transpose(-1, -2), "decay": G_last.transpose(-1, -2).exp(),
            "Aqk": torch.where(causal, qk, 0.0), "T": T}


def run_variant(inputs, name, head_group=8):
    """(o, final_state) of a variant, computed head group by head group (bench memory)."""
    H = inputs[0].shape[2]
    outs, states = [], []
    for h0 in range(0, H, head_group):
        hs = slice(h0, min(H, h0 + head_group))
        sub = tuple(x[:, :, hs] for x in inputs[:5]) + (inputs[5][hs],
                                                          inputs[6].view(H, -1)[hs].reshape(-1))
        init = None if inputs[7] is None else inputs[7][:, hs]
        if name.startswith("cut"):
            p = parts(*sub, solve="exact32")
            o, s = kda_scan(p, init, window=int(name[3:]))
        else:
            p = parts(*sub, solve=name)
            o, s = kda_scan(p, init, operands=BF16)
        outs.append(o.to(BF16).float())  # o in the input dtype, as the GPU returns it
        states.append(s)
        del p
    return torch.cat(outs, 2), torch.cat(states, 1)


def judge(out, ref):
    res = {}
    for name, o, r in zip(KDA.output_names, out, ref):
        tol = KDA.tolerance_for(name)
        od, rd = o.double(), r.double()
        if not bool(torch.isfinite(od).all()):
            res[name] = (math.inf, math.inf)
            continue
        rel = float((od - rd).norm() / rd.norm()) / tol.rel_err
        el = float(((od - rd).abs() / (tol.atol + tol.rtol * rd.abs())).max())
        res[name] = (rel, el)
    return res


VARIANTS = ["exact32", "sol", "fla", "neumann1", "neumann2", "neumann3", "blockdiag16", "blockdiag32",
            "cut128", "cut512", "cut2048", "ref64"]


def fmt(res):
    return "  ".join(f"{n[:5]} rel {r:7.3f} el {e:7.3f}" for n, (r, e) in res.items())


def main():
    shape = sys.argv[1]
    names = VARIANTS if sys.argv[2] == "all" else sys.argv[2].split(",")
    seeds = [int(s) for s in sys.argv[3].split(",")]
    cfg = {}
    for kv in sys.argv[4:]:
        key, val = kv.split("=")
        cfg[key] = int(val) if key == "conv" else float(val)
    dims = LONG if shape == "long" else dict(KDA.dims(shape)) if shape in KDA.shapes else eval(shape)
    T = int(dims["T"])
    for seed in seeds:
        t0 = time.time()
        inputs = as_f32(make_inputs(dims, seed, **cfg))
        ref = recurrent_reference(*inputs)
        o, s = ref
        print(f"# {shape} seed={seed} cfg={cfg} ref {time.time() - t0:.1f}s  o rms {float(o.pow(2).mean().sqrt()):.4f} "
              f"max {float(o.abs().max()):.3f}  state rms {float(s.pow(2).mean().sqrt()):.3f} max {float(s.abs().max()):.2f}",
              flush=True)
        for name in names:
            if name.startswith("cut") and int(name[3:]) >= T:
                continue
            t0 = time.time()
            if name == "ref64":
                out = recurrent_reference(*inputs, dtype=torch.float64)
                res = judge(ref, out)  # the float32 reference judged against float64
                res = {k: (r, e) for k, (r, e) in res.items()}
            else:
                res = judge(run_variant(inputs, name), ref)
            print(f"  {name:12s} {fmt(res)}  ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
