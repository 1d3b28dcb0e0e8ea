"""The `optimize` prompt: the optimisation task stated once, so every client starts from the same goal."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, Prompt

from kernels import get_problem
from server.service import Service, UnknownInput

TEMPLATE = """\
Goal: make `{problem}` at shape `{shape}` as fast as possible on the Hopper GPU (H100/H200) while staying
correct: the speedup over the baseline that `profile` reports is the score.

The problem: {summary}
Shapes: {shapes}. Tolerance: relative error <= {rel_err:g}, |out - ref| <= {atol:g} + {rtol:g}|ref|.
Read problem://{problem}/description for the exact contract and problem://{problem}/reference for the
reference; problem://{problem}/starter is a simple, correct kernel to start from.{best}

Rules (checked by the tools; a violation is refused):
- A candidate is one Python file that defines `entry(*inputs)`, launches `@triton.jit` kernels (or Gluon
  `@gluon.jit` ones, which `profile` runs only where a GPU is) and returns the output(s). The kernels do the
  work, written in Triton.
- No kernel libraries (flash-attn, FLA, FlashInfer, xformers, CUTLASS, ...), no CUDA extensions, no
  torch compute (matmul, softmax, exp, reductions, ...). Allocation, views and copies are fine
  (torch.empty, .view, .reshape, .contiguous).
- Outputs must be computed on every call from the inputs given; inputs must not be modified.

How to work:
1. `compile(problem, source)`: registers, spills, shared memory, wgmma/TMA use per kernel. Cheap; fix
   compile errors and spills here first.
2. `profile(problem, source)`: correctness on fresh random inputs (the shape and small odd shapes),
   then time against the baseline: median us, IQR spread, speedup, GB/s and TFLOP/s. A wrong or
   refused candidate comes back as an error with the details. Differences inside the spread are noise.
3. `note(text, problem)`: record each hypothesis, what the numbers said and what to try next.
4. `attempts(problem)` and `best(problem)`: what was tried, what failed and why, the best so far with
   its source; `attempt(id)` reads one in full. Do not repeat a failed idea without a new reason.
Change one thing at a time, keep the best kernel, and stop when further changes stay within noise.
"""


def optimize_text(service: Service, problem: str, shape: str = "bench") -> str:
    shape = service.resolve(problem, shape)
    p = get_problem(problem)
    shapes = "; ".join(f"{name} ({', '.join(f'{k}={v}' for k, v in dims.items())})"
                       for name, dims in p.shapes.items())
    found: dict[str, Any] | None = service.best(problem, shape)  # verified attempts only
    best = ""
    if found is not None and found.get("median_us") is not None:
        speed = f", {found['speedup']:.2f}x the baseline" if found.get("speedup") else ""
        best = (f"\nBest so far (verified): attempt {found['id']}, {found['median_us']:.2f} us{speed} "
                f"(best://{problem}/{shape}).")
    elif found is not None:
        best = (f"\nA verified correct kernel is logged (attempt {found['id']}, best://{problem}/{shape}), "
                "not yet timed.")
    return TEMPLATE.format(problem=problem, shape=shape, summary=p.summary, shapes=shapes,
                           rel_err=p.tolerance.rel_err, atol=p.tolerance.atol, rtol=p.tolerance.rtol, best=best)


def register_prompts(app: MCPServer, service: Service) -> None:
    @app.prompt(name="optimize", title="Optimise a kernel",
                description="the optimisation task for a problem: goal, rules, and how to use the tools")
    def optimize(problem: str, shape: str = "bench") -> str:
        try:
            return optimize_text(service, problem, shape)
        except UnknownInput as exc:  # the caller's to fix: say what is valid (other faults stay generic)
            raise MCPError(INVALID_PARAMS, str(exc.args[0] if exc.args else exc)) from None


def check_prompt_request(prompts: list[Prompt], name: str, arguments: dict[str, str] | None) -> None:
    """Refuse, as invalid params naming what is valid, a prompt request no prompt can answer: an unknown prompt,
    a required argument missing, an argument the prompt does not take. The SDK would raise a plain exception for
    these, answered as an internal error and logged with a traceback, though the mistake is the caller's."""
    found = next((p for p in prompts if p.name == name), None)
    if found is None:
        known = ", ".join(p.name for p in prompts) or "none"
        raise MCPError(INVALID_PARAMS, f"unknown prompt {name!r} (known: {known})")
    declared = {a.name: bool(a.required) for a in found.arguments or []}
    given = set(arguments or {})
    takes = ", ".join(f"{n} (required)" if required else n for n, required in declared.items()) or "none"
    missing = ", ".join(repr(n) for n, required in declared.items() if required and n not in given)
    if missing:
        raise MCPError(INVALID_PARAMS, f"prompt {name!r} needs the argument {missing} (it takes: {takes})")
    unknown = ", ".join(repr(n) for n in sorted(given - set(declared)))
    if unknown:
        raise MCPError(INVALID_PARAMS, f"prompt {name!r} takes no argument {unknown} (it takes: {takes})")
