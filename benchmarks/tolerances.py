"""What each problem's tolerance admits and rejects, measured: the figures its bounds are derived from.

    PYTHONPATH=. python3 benchmarks/tolerances.py --json-out /tmp/tolerances.json        # on a GPU: every problem
    PYTHONPATH=. python3 benchmarks/tolerances.py --problems kda --kda-shapes mid,bench  # a subset
    PYTHONPATH=. python3 benchmarks/tolerances.py --device cpu --quick                   # smoke test, small shapes

From the project root with it on PYTHONPATH: the approximations it measures are the tests' own
(tests/kernels/test_problem_approximations.py), which the installed package does not hold.

For every problem, shape and seed it computes, against the problem's own reference (what the checker
compares with), the error of:
- reference_fp32_vs_fp64: the reference's own float32 arithmetic against float64 on the same inputs
  (for MLA and softmax, whose references compute in float64, the same formula in float32): the floor
  under every bound;
- the exact algorithms as fast kernels compute them: the project's solution (kernels/<p>/solution.py
  entry(), where present), the starter, the baselines (FLA's chunk_kda for KDA when importable, with
  FLA_FLASH_KDA=0), and for KDA an emulation of a bf16 tensor-core kernel (exact_bf16_operands);
  these must pass, with room;
- cheap approximations (tests/kernels/test_problem_approximations.py): KDA with its history cut to the last
  W tokens or its within-chunk solve cut to a Neumann series of 1-3 terms, MLA with keys dropped, an fp8
  cache or missing columns, softmax in half precision or with part of each row missing; these must fail.

Per output it records the relative Frobenius error, the atol each would need at the problem's rtol
(max |out - ref| - rtol |ref|), how many times it exceeds the tolerance (excess: > 1 fails) and the
verdict under the tolerance in force. JSON goes to stdout and to --json-out; a table goes to stderr.
On an H200 the default run takes about two minutes (most of it FLA's autotuning and the float64
references at bench).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

os.environ.setdefault("FLA_FLASH_KDA", "0")  # FLA's own Triton chunk_kda, not the CUTLASS FlashKDA

import torch

from kernels import get_problem
from kernels.spec import Problem, Tolerance, as_outputs, compare

ROOT = Path(__file__).resolve().parent.parent

Call = tuple[str, str, Callable[..., Any], tuple[Any, ...]]  # (row name, kind, function, its arguments)

LEGEND = {
    "rel_err": "||out - ref|| / ||ref|| (Frobenius), against the problem's reference; max and median over seeds",
    "atol_needed": "max over elements of |out - ref| - rtol |ref| at the problem's rtol: the smallest atol that "
                   "passes every element (<= 0: rtol alone suffices); max over seeds",
    "excess": "how many times the output misses its tolerance, by its worse test: max(rel_err / rel_err bound, "
              "max over elements of |out - ref| / (atol + rtol |ref|)); > 1 fails; max and min over seeds",
    "ok": "the verdict of kernels.spec.compare under the tolerance in force, on every seed",
    "ref_stats": "rms and max |ref| of each output of the reference, max over seeds",
    "reference_fp32_vs_fp64": "the reference computed in float32 against float64 on the same inputs (for MLA "
                              "and softmax: the same formula in float32 against the float64 reference)",
    "kind": "exact: must pass (a correct kernel or its emulation); approximation: a shortcut that must fail; "
            "floor: the reference's own error; info: a lower-precision variant, reported only",
}


def load_module(path: Path) -> ModuleType | None:
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"tolerances_{path.parent.name}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> dict[str, Any]:
    o = out.detach().double()
    r = ref.detach().to(device=o.device, dtype=torch.float64)
    verdict = compare(out, ref, tol)
    if not bool(torch.isfinite(o).all()):
        return {"rel_err": math.inf, "atol_needed": math.inf, "excess": math.inf, "ok": False,
                "reason": verdict["reason"]}
    diff = (o - r).abs()
    rel = float((o - r).norm() / r.norm()) if float(r.norm()) > 0 else float(diff.max())
    elementwise = float((diff / (tol.atol + tol.rtol * r.abs())).max())
    return {
        "rel_err": rel,
        "atol_needed": float((diff - tol.rtol * r.abs()).max()),
        "excess": max(rel / tol.rel_err, elementwise),
        "ok": bool(verdict["ok"]),
        "reason": verdict["reason"],
    }


class Table:
    """Rows of (problem, shape, candidate) -> per output a list of per-seed measurements."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, Any]] = {}

    def shape(self, problem: Problem, shape: str, dims: dict[str, int], seeds: list[int]) -> dict[str, Any]:
        entry = self.data.setdefault(problem.name, {
            "tolerance": {n: vars(problem.tolerance_for(n)) for n in problem.output_names},
            "shapes": {},
        })
        return entry["shapes"].setdefault(shape, {"dims": dims, "seeds": seeds, "ref_stats": {}, "rows": {},
                                                  "skipped": {}})

    @staticmethod
    def add(block: dict[str, Any], name: str, kind: str, output: str, m: dict[str, Any]) -> None:
        row = block["rows"].setdefault(name, {"kind": kind, "outputs": {}})
        row["outputs"].setdefault(output, []).append(m)

    @staticmethod
    def seconds(block: dict[str, Any], name: str, kind: str, seconds: float) -> None:
        """Wall time of one call (the first seed's includes compiling and autotuning)."""
        row = block["rows"].setdefault(name, {"kind": kind, "outputs": {}})
        row.setdefault("seconds", []).append(seconds)

    @staticmethod
    def ref_stats(block: dict[str, Any], names: Sequence[str], refs: Sequence[torch.Tensor]) -> None:
        for n, r in zip(names, refs):
            r64 = r.detach().double()
            s = block["ref_stats"].setdefault(n, {"rms": 0.0, "max_abs": 0.0})
            s["rms"] = max(s["rms"], float(r64.pow(2).mean().sqrt()))
            s["max_abs"] = max(s["max_abs"], float(r64.abs().max()))

    def summary(self) -> dict[str, dict[str, Any]]:
        """A copy of the data with each output's per-seed list reduced to its worst and median figures."""
        data = copy.deepcopy(self.data)
        for p in data.values():
            for block in p["shapes"].values():
                for row in block["rows"].values():
                    for n, ms in list(row["outputs"].items()):
                        rels = [m["rel_err"] for m in ms]
                        row["outputs"][n] = {
                            "rel_err_max": max(rels), "rel_err_median": statistics.median(rels),
                            "atol_needed_max": max(m["atol_needed"] for m in ms),
                            "excess_max": max(m["excess"] for m in ms), "excess_min": min(m["excess"] for m in ms),
                            "ok_all": all(m["ok"] for m in ms), "ok_any": any(m["ok"] for m in ms),
                            "n_seeds": len(ms),
                            "first_failure": next((m["reason"] for m in ms if not m["ok"]), ""),
                        }
                    row["seconds_max"] = max(row.pop("seconds", [0.0]))
        return data

    @staticmethod
    def lines(data: dict[str, dict[str, Any]]) -> list[str]:
        out = []
        for pname, p in data.items():
            tol = ", ".join(f"{n}: rel_err {t['rel_err']:g} atol {t['atol']:g} rtol {t['rtol']:g}"
                            for n, t in p["tolerance"].items())
            out.append(f"== {pname}  (tolerance {tol})")
            for sname, block in p["shapes"].items():
                stats = "; ".join(f"{n} rms {s['rms']:.3g} max {s['max_abs']:.3g}"
                                  for n, s in block["ref_stats"].items())
                out.append(f"-- {pname}/{sname} {block['dims']} seeds {block['seeds']}  ref: {stats}")
                for rname, row in block["rows"].items():
                    cells = []
                    for n, s in row["outputs"].items():
                        verdict = "PASS" if s["ok_all"] else ("FAIL" if not s["ok_any"] else "MIXED")
                        cells.append(f"{n}: rel {s['rel_err_max']:.2e} atol_need {s['atol_needed_max']:.1e} "
                                     f"x{s['excess_min']:.2g}-{s['excess_max']:.2g} {verdict}")
                    out.append(f"   {rname:<30} [{row['kind']:<13}] " + " | ".join(cells)
                               + f"  ({row['seconds_max']:.1f} s)")
                for rname, why in block["skipped"].items():
                    out.append(f"   {rname:<30} skipped: {why}")
        return out


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------


def run_kda(table: Table, device: str, shapes: list[str], seeds_for: Callable[[str], list[int]],
            done: Callable[[str], None]) -> None:
    import tests.kernels.test_problem_approximations as approx
    from kernels.kda.reference import recurrent_reference

    problem = get_problem("kda")
    float64_reference: Callable[..., tuple[torch.Tensor, ...]] = recurrent_reference
    solution = load_module(ROOT / "kernels" / "kda" / "solution.py")
    starter = load_module(ROOT / "kernels" / "kda" / "starter.py")
    fla = problem.baseline("fla_chunk_kda")
    fla_why = fla.available() if device.startswith("cuda") else "needs a CUDA GPU"
    for shape in shapes:
        dims = dict(problem.dims(shape)) if shape != "long" else dict(approx.KDA_LONG)
        seeds = seeds_for(shape)
        block = table.shape(problem, shape, dims, seeds)
        T = int(dims["T"])
        if fla_why:
            block["skipped"]["fla_chunk_kda"] = fla_why
        for seed in seeds:
            dtype = torch.bfloat16
            inputs = problem.make_inputs(dims, seed, device, dtype)
            if not device.startswith("cuda"):  # CPU: bf16 values, float32 tensors (the CPU kernels' dtype)
                inputs = tuple(x.float() if isinstance(x, torch.Tensor) and x.dtype == dtype else x for x in inputs)
            ref = problem.reference(*inputs)
            sync(device)
            table.ref_stats(block, problem.output_names, ref)
            truth = float64_reference(*inputs, dtype=torch.float64)
            for n, r32, r64 in zip(problem.output_names, ref, truth):
                table.add(block, "reference_fp32_vs_fp64", "floor", n, measure(r32, r64, problem.tolerance_for(n)))
            del truth
            # (name, kind, function, arguments): called right here, one after the other.
            calls: list[Call] = [
                ("torch_chunked", "exact", problem.baseline("torch_chunked").fn, inputs),
                ("exact_bf16_operands", "exact", approx.kda_exact_bf16, (inputs,)),
            ]
            if device.startswith("cuda"):
                if solution is not None:
                    calls.append(("solution", "exact", solution.entry, inputs))
                if starter is not None:
                    calls.append(("starter", "exact", starter.entry, inputs))
                if not fla_why:
                    calls.append(("fla_chunk_kda", "exact", fla.fn, inputs))
            for window in approx.KDA_WINDOWS:
                if window < T:
                    calls.append((f"truncated_history_W{window}", "approximation", approx.kda_truncated,
                                  (inputs, window)))
                else:
                    block["skipped"][f"truncated_history_W{window}"] = f"window {window} >= T = {T}: exact"
            for order in approx.KDA_SOLVE_ORDERS:
                calls.append((f"truncated_solve_neumann{order}", "approximation", approx.kda_truncated_solve,
                              (inputs, order)))
            parts = approx.kda_chunk_parts(*inputs[:7])
            low = {"operands": torch.bfloat16, "out_dtype": inputs[0].dtype}
            calls += [
                ("state_bf16_between_chunks", "info", _scan,
                 (parts, inputs[7], {**low, "state_dtype": torch.bfloat16})),
                ("decay_e^G_last_in_bf16", "info", _scan,
                 (parts, inputs[7], {**low, "decay_dtype": torch.bfloat16})),
            ]
            for name, kind, fn, call_args in calls:
                start = time.time()
                try:
                    outs = as_outputs(fn(*call_args))
                    sync(device)
                    table.seconds(block, name, kind, time.time() - start)
                except Exception as exc:  # a candidate that cannot run here is reported, not fatal
                    block["skipped"][name] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    continue
                for n, o, r in zip(problem.output_names, outs, ref):
                    table.add(block, name, kind, n, measure(o, r, problem.tolerance_for(n)))
            del parts
            done(f"kda/{shape} seed {seed}")


def _scan(parts: dict[str, Any], h0: torch.Tensor | None, options: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """tests/kernels/test_problem_approximations.kda_scan with its options, o cast to the input dtype."""
    import tests.kernels.test_problem_approximations as approx

    options = dict(options)
    out_dtype = options.pop("out_dtype")
    o, s = approx.kda_scan(parts, h0, **options)
    return o.to(out_dtype), s


def run_calls(table: Table, block: dict[str, Any], device: str, calls: list[Call], ref: torch.Tensor,
              tol: Tolerance) -> None:
    """Single-output problems: call each, time it, measure its output against the reference."""
    for name, kind, fn, call_args in calls:
        start = time.time()
        try:
            out = fn(*call_args)
            sync(device)
            table.seconds(block, name, kind, time.time() - start)
        except Exception as exc:  # a candidate that cannot run here is reported, not fatal
            block["skipped"][name] = f"{type(exc).__name__}: {str(exc)[:300]}"
            continue
        table.add(block, name, kind, "out", measure(out, ref, tol))


def run_mla(table: Table, device: str, shapes: list[str], seeds_for: Callable[[str], list[int]],
            done: Callable[[str], None]) -> None:
    import tests.kernels.test_problem_approximations as approx

    problem = get_problem("mla_decode")
    from kernels.mla_decode.problem import D_LATENT, SOFTMAX_SCALE

    solution = load_module(ROOT / "kernels" / "mla_decode" / "solution.py")
    starter = load_module(ROOT / "kernels" / "mla_decode" / "starter.py")

    def fp32_formula(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        s = torch.bmm(q.float(), kv.float().transpose(1, 2)) * SOFTMAX_SCALE
        return torch.bmm(torch.softmax(s, dim=-1), kv.float()[..., :D_LATENT])

    for shape in shapes:
        dims = dict(problem.dims(shape))
        seeds = seeds_for(shape)
        block = table.shape(problem, shape, dims, seeds)
        for seed in seeds:
            q, kv = problem.inputs(shape, seed, device, torch.bfloat16 if device.startswith("cuda") else None)
            if not device.startswith("cuda"):
                q, kv = q.to(torch.bfloat16).float(), kv.to(torch.bfloat16).float()
            (ref,) = problem.reference(q, kv)
            table.ref_stats(block, ["out"], (ref,))
            qkv = (q, kv)
            calls: list[Call] = [
                ("reference_fp32_vs_fp64", "floor", fp32_formula, qkv),
                ("torch", "exact", problem.baseline("torch").fn, qkv),
            ]
            if device.startswith("cuda"):
                if solution is not None:
                    calls.append(("solution", "exact", solution.entry, qkv))
                if starter is not None:
                    calls.append(("starter", "exact", starter.entry, qkv))
            calls += [(name, "approximation", f, qkv) for name, f in approx.MLA_APPROXIMATIONS.items()]
            calls += [
                ("top_3/4_keys", "info", approx.mla_top_k, (q, kv, 3 / 4)),
                ("top_7/8_keys", "info", approx.mla_top_k, (q, kv, 7 / 8)),
                ("tail_1/64_dropped", "info", approx.mla_tail_dropped, (q, kv, 1 / 64)),
                ("bf16_scores", "info", approx.mla_bf16_scores, qkv),
            ]
            run_calls(table, block, device, calls, ref, problem.tolerance)
            done(f"mla_decode/{shape} seed {seed}")


def _softmax_fp32(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1)


def run_softmax(table: Table, device: str, shapes: list[str], seeds_for: Callable[[str], list[int]],
                done: Callable[[str], None]) -> None:
    import tests.kernels.test_problem_approximations as approx

    problem = get_problem("softmax")
    solution = load_module(ROOT / "kernels" / "softmax" / "solution.py")
    starter = load_module(ROOT / "kernels" / "softmax" / "starter.py")
    for shape in shapes:
        dims = dict(problem.dims(shape))
        seeds = seeds_for(shape)
        block = table.shape(problem, shape, dims, seeds)
        if solution is None:
            block["skipped"]["solution"] = "kernels/softmax/solution.py does not exist"
        for seed in seeds:
            (x,) = problem.inputs(shape, seed, device)
            (ref,) = problem.reference(x)
            table.ref_stats(block, ["out"], (ref,))
            calls: list[Call] = [
                ("reference_fp32_vs_fp64", "floor", _softmax_fp32, (x,)),
                ("exp2_fp32", "exact", approx.softmax_exp2_fp32, (x,)),
            ]
            if device.startswith("cuda"):
                if solution is not None:
                    calls.append(("solution", "exact", solution.entry, (x,)))
                if starter is not None:
                    calls.append(("starter", "exact", starter.entry, (x,)))
            calls += [(name, "approximation", f, (x,)) for name, f in approx.SOFTMAX_APPROXIMATIONS.items()]
            run_calls(table, block, device, calls, ref, problem.tolerance)
            done(f"softmax/{shape} seed {seed}")


def verdicts(data: dict[str, dict[str, Any]]) -> list[str]:
    """Every exact row that fails somewhere and every approximation that passes somewhere: what to look at."""
    problems = []
    for pname, p in data.items():
        for sname, block in p["shapes"].items():
            for rname, row in block["rows"].items():
                for n, s in row["outputs"].items():
                    if row["kind"] in ("exact", "floor") and not s["ok_all"]:
                        problems.append(f"{pname}/{sname} {rname} {n}: an exact algorithm FAILS ({s['first_failure']})")
                    if row["kind"] == "approximation" and s["ok_any"]:
                        problems.append(f"{pname}/{sname} {rname} {n}: an approximation PASSES on some seed")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", default="kda,mla_decode,softmax")
    ap.add_argument("--kda-shapes", default="mid,bench", help="any of the problem's shapes (small, odd: add them for "
                    "the elementwise bounds; each new shape costs ~70 s of FLA and solution compiling on the "
                    "H200), and 'long' (T = 4096, H = 2, K = 128, V = 32: the CPU test's long shape)")
    ap.add_argument("--mla-shapes", default="small,odd,bench,bench_b64")
    ap.add_argument("--softmax-shapes", default="small,odd,bench")
    ap.add_argument("--seeds", type=int, default=0, help="seeds per shape (0: 8 at small shapes, 4 at mid, 2 at bench)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="the small and odd shapes only, 2 seeds (a smoke test)")
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--table-from", type=Path, default=None, help="print the table of a saved --json-out and exit")
    args = ap.parse_args()
    if args.table_from:
        saved = json.loads(args.table_from.read_text())
        print("\n".join([*Table.lines(saved["problems"]), "", "attention:", *saved["attention"],
                         f"elapsed {saved['elapsed_s']} s, finished: {saved.get('finished')}"]))
        return 0

    t0 = time.time()
    big = {"bench", "bench_h96", "bench_b2", "bench_b64"}

    def seeds_for(shape: str) -> list[int]:
        if args.seeds:
            return list(range(args.seeds))
        if args.quick:
            return [0, 1]
        return list(range(2 if shape in big else 4 if shape in ("mid", "long") else 8))

    def pick(text: str) -> list[str]:
        return ["small", "odd"] if args.quick else [s for s in text.split(",") if s]

    fla_version = None
    if importlib.util.find_spec("fla") is not None:
        try:
            import fla

            fla_version = getattr(fla, "__version__", "unknown")
        except Exception as exc:
            fla_version = f"import failed: {type(exc).__name__}: {exc}"
    env: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__, "fla": fla_version, "FLA_FLASH_KDA": os.environ.get("FLA_FLASH_KDA"),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None

    table = Table()

    def report(finished: bool) -> dict[str, Any]:
        data = table.summary()
        attention = verdicts(data)
        return {
            "about": (__doc__ or "").strip().splitlines()[0],
            "finished": finished,
            "legend": LEGEND,
            "environment": env,
            "elapsed_s": round(time.time() - t0, 1),
            "attention": attention or ["none: every exact algorithm passes everywhere, every approximation fails"],
            "problems": data,
        }

    def done(label: str) -> None:
        """After each seed: progress on stderr, and the figures so far to --json-out (a run cut short keeps them)."""
        print(f"[{time.time() - t0:7.1f}s] {label}", file=sys.stderr, flush=True)
        if args.json_out:
            args.json_out.parent.mkdir(parents=True, exist_ok=True)
            args.json_out.write_text(json.dumps(report(False), indent=1, default=str) + "\n")

    wanted = [p for p in args.problems.split(",") if p]
    runs = {"kda": (run_kda, args.kda_shapes), "mla_decode": (run_mla, args.mla_shapes),
            "softmax": (run_softmax, args.softmax_shapes)}
    for name in wanted:
        fn, shapes = runs[name]
        fn(table, args.device, pick(shapes), seeds_for, done)
    final = report(True)
    text = json.dumps(final, indent=1, default=str)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    lines = Table.lines(final["problems"])
    print("\n".join([*lines, "", "attention:", *final["attention"], f"elapsed {final['elapsed_s']} s"]),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
