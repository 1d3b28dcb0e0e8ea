"""The kernel census: which kernels a candidate's entry() really ran, seen from outside its Python (guarantee 5).

The in-process guard (tools.guard) gives quick, pointed refusals, but a candidate can patch its way around
anything in its own process. Nsight Compute cannot be patched from there: it sees every kernel the process
launched, from any thread, stream or library. Its report travels on the stdout the profiled process inherits, so
that process points its own output elsewhere before the candidate loads (tools.ncu_run.detach_output), and a
report with a second header or a kernel's rows apart is refused as forged. The judge runs the candidate once
more, in a fresh sandboxed process under `ncu`, without the guard (as its timed reps run), and accepts only:
- kernels named after a @triton.jit / @gluon.jit function that the candidate's source defines, and
- torch's copies and fills (allocation, `.contiguous()`, dtype conversion, `zero_()`),
so torch compute (reductions, matmuls through cuBLAS) and kernel libraries show up by name and are refused.
It costs seconds (ncu's start, one profiled pass), so the service asks for it once per source that is about to
become a best attempt (tools' job op "census"), and keeps the answer in the log.

`python -m tools.census SPEC.json` is the target process ncu starts.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.candidate import source_sha
from tools.environment import project_root, scrubbed_env
from tools.guard import kernel_names
from tools.ncu import summarize_csv
from tools.ncu_run import TARGET_LOG, MalformedReport, detach_output, find_ncu, report_rows, target_output
from tools.reaped import run_reaped, trusted_python
from tools.sandbox import triton_cache_of
from tools.written import copy_written, read_written

CENSUS_TIMEOUT_S = 300.0
OUTPUTS_LIMIT_BYTES = 4 << 30  # the census run's outputs, as the profile's (tools.judge.OUTPUT_LIMIT_BYTES)
CACHE_COPY_LIMIT_BYTES, CACHE_COPY_MAX_FILES = 1 << 30, 65536  # the source's Triton cache, copied
CALLS = 2
# torch kernels that only move or fill memory (what the guard's allowed aten ops launch).
COPY_KERNELS = re.compile(r"(FillFunctor|direct_copy_kernel|CatArrayBatchedCopy|copy_kernel|"
                          r"elementwise_kernel_with_index<.*arange|zero_kernel|fill_kernel)")
# Names of library kernels that are plain identifiers too: refused even if a candidate names a function so.
LIBRARY_MARKERS = re.compile(r"(cublas|cutlass|xmma|nvjet|cudnn|flash|fmha|gemv|gemmk|at::native|void )",
                             re.IGNORECASE)


def classify(kernels: dict[str, int], allowed_names: set[str]) -> tuple[list[dict[str, Any]], list[str]]:
    rows, refused = [], []
    for name, launches in sorted(kernels.items()):
        base = name.split("(")[0].strip()
        if base in allowed_names and not LIBRARY_MARKERS.search(base):
            verdict = "candidate's Triton kernel"
        elif COPY_KERNELS.search(name):
            verdict = "copy or fill"
        else:
            verdict = "refused"
            refused.append(name)
        rows.append({"name": name[:300], "launches": launches, "verdict": verdict})
    return rows, refused


def parse_kernel_names(text: str) -> dict[str, int]:
    """Launches per kernel name in ncu's report (one ID a launch). Raises MalformedReport."""
    counts: dict[str, int] = {}
    seen: set[str] = set()
    for row in report_rows(text):
        rid, name = row["ID"], row.get("Kernel Name")
        if name is None or rid in seen:
            continue
        seen.add(rid)
        counts[name] = counts.get(name, 0) + 1
    return counts


def run_census(worker: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Judge-side: profile one candidate process under ncu and classify every kernel it launched."""
    from kernels import get_problem

    if not worker.cuda:
        return {"ok": True, "status": "not_applicable", "reason": "no GPU: the interpreter launches no kernels"}
    ncu = find_ncu()
    if ncu is None:
        return {"ok": True, "status": "unavailable", "reason": "ncu (Nsight Compute) is not installed here"}
    problem = get_problem(job["problem"])
    shape = job.get("shape") or "bench"
    source = job["source"]
    import secrets

    import torch

    inputs = problem.inputs(shape, secrets.randbits(31), "cuda")
    worker.progress("kernel census (Nsight Compute)")
    with tempfile.TemporaryDirectory(prefix="marathon-census-") as tmp:
        work = Path(tmp)
        torch.save([x.cpu() if isinstance(x, torch.Tensor) else x for x in inputs], work / "inputs.pt")
        (work / "candidate.py").write_text(source, encoding="utf-8")
        # The kernels this source compiled in its profile: copied, not shared, since the target may only write
        # to its own folder, and recompiling them is most of a census's time.
        compiled = triton_cache_of(worker.sandbox.root, source_sha(source))
        if compiled.is_dir() and not compiled.is_symlink():
            copy_written(compiled, work / "triton-cache", limit_bytes=CACHE_COPY_LIMIT_BYTES,
                         max_files=CACHE_COPY_MAX_FILES)
        spec = work / "spec.json"
        spec.write_text(json.dumps({"workdir": str(work)}))
        env = scrubbed_env({"PYTHONPATH": str(project_root()), "HOME": str(work), "TMPDIR": str(work),
                            "TRITON_CACHE_DIR": str(work / "triton-cache")})
        for name in ("MARATHON_HOME", "XDG_STATE_HOME", "TRITON_INTERPRET"):
            env.pop(name, None)
        cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--metrics",
               "gpu__time_duration.sum", *trusted_python("tools.census", str(spec))]
        limit = float(job.get("timeout", CENSUS_TIMEOUT_S))
        try:  # under tools.reaped: nothing the candidate starts outlives the census
            proc = run_reaped(cmd, limit, cwd=work, env=env)
        except subprocess.TimeoutExpired:
            return {"ok": False, "status": "failed", "reason": f"the census run took longer than {limit:.0f} s"}
        rc = read_written(work / "rc", 16)  # the target's folder: what the candidate left there, links included
        target_rc = rc.decode("ascii", "replace").strip() if rc is not None else None
        outputs = _load_outputs(work / "outputs.pt") if target_rc == "0" else None
        printed = target_output(work)
    try:
        kernels = parse_kernel_names(proc.stdout)
    except MalformedReport as exc:
        return {"ok": False, "status": "failed", "kernels": [],
                "reason": f"Nsight Compute's report was malformed ({exc}): a report written by the candidate's "
                          "process is not the profiler's"}
    ncu_said = (proc.stderr or "")[-700:] + (proc.stdout or "")[-700:]
    if target_rc != "0":
        tail = (printed[-800:] + "\n" + ncu_said) if printed else ncu_said
        return {"ok": False, "status": "failed", "kernels": [],
                "reason": f"the candidate did not complete its census calls (exit {proc.returncode}): {tail}"}
    if not kernels:
        # Nothing profiled at all, although entry() ran: ncu could not profile here (no access to the GPU's
        # counters, a driver it does not support), which says nothing of the candidate: the timing stays correct
        # and is not verified (tools' service; no operator waiver), and, not being a refusal, it is not kept in the
        # log: the census is asked again once ncu works.
        return {"ok": False, "status": "unprofiled", "kernels": [],
                "reason": f"Nsight Compute profiled no kernel of the census run: {ncu_said.strip()[-1000:]}"}
    wrong = _wrong_outputs(problem, inputs, outputs)
    if wrong:
        return {"ok": False, "status": "refused", "kernels": [],
                "reason": f"the census run's outputs were not the problem's answer ({wrong}): it did other work "
                          "under the profiler than in its checks"}
    rows, refused = classify(kernels, kernel_names(source))
    if not any(r["verdict"] == "candidate's Triton kernel" for r in rows):
        return {"ok": False, "status": "refused", "kernels": rows,
                "reason": "entry() launched none of the candidate's own Triton kernels"}
    if refused:
        return {"ok": False, "status": "refused", "kernels": rows,
                "reason": "entry() ran kernels that are not the candidate's Triton kernels (torch compute or a "
                          "kernel library): " + "; ".join(n[:120] for n in refused[:5])}
    durations = summarize_csv(proc.stdout, calls=CALLS)
    kernel_us = durations.get("gpu_time_us_per_call") if durations else None
    return {"ok": True, "status": "passed", "kernels": rows, "calls": CALLS, "kernel_us_per_call": kernel_us}


def _load_outputs(path: Path) -> list[Any] | None:
    import torch

    data = read_written(path, OUTPUTS_LIMIT_BYTES)
    if data is None:
        return None
    try:
        loaded = torch.load(io.BytesIO(data), weights_only=True)  # tensors only: candidate code wrote the file
    except Exception:
        return None
    return loaded if isinstance(loaded, list) else None


def _wrong_outputs(problem: Any, inputs: Any, outputs: list[Any] | None) -> str | None:
    """Why the census run's outputs are not right for its inputs, or None when they are."""
    import torch

    from kernels.spec import as_outputs, compare

    if outputs is None or len(outputs) != len(problem.output_names) or \
            not all(type(o) is torch.Tensor for o in outputs):
        return "missing or not plain tensors"
    refs = as_outputs(problem.reference(*inputs))
    for name, out, ref in zip(problem.output_names, outputs, refs):
        verdict = compare(out.to(ref.device), ref, problem.tolerance_for(name))
        if not verdict["ok"]:
            return f"output '{name}': {verdict['reason']}"
    return None


def _target(spec_path: str) -> int:
    """Inside ncu: a CUDA context first (ncu's injection is set up there), then the sandbox, then the candidate."""
    import torch

    spec = json.loads(Path(spec_path).read_text())
    work = Path(spec["workdir"])
    detach_output(work / TARGET_LOG)  # ncu's report travels on the stdout this process inherits
    rc_file = work / "rc"
    rc_file.write_text("1")
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in torch.load(work / "inputs.pt")]
    torch.cuda.synchronize()
    from tools.sandbox import confine

    confine(work, cuda=True)
    from tools.candidate import load_candidate

    module = load_candidate(work / "candidate.py")
    outs = None
    for _ in range(CALLS):
        outs = module.entry(*inputs)
    torch.cuda.synchronize()
    # The last call's outputs, for the judge to check: a census run must do the real work, or the kernels it
    # shows (and their durations) would be those of a stand-in.
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    torch.save([o.detach().cpu() if isinstance(o, torch.Tensor) else None for o in outs], work / "outputs.pt")
    rc_file.write_text("0")
    return 0


if __name__ == "__main__":
    sys.exit(_target(sys.argv[1]))
