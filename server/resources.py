"""MCP resources: what an agent reads before and between tool calls.

problem://{name}/description   the contract (markdown): inputs, outputs, shapes, tolerance, baseline
problem://{name}/reference     the reference implementation (problem.py and reference.py)
problem://{name}/starter       a simple, correct Triton candidate to start from
problem://{name}/shapes        shapes, check shapes, tolerance, dtypes, FLOPs and bytes (JSON)
best://{problem}/{shape}       the best verified correct kernel in the event log so far, numbers on top;
                               comments saying there is none yet until one is verified (never an error)

Each is registered as a template (any problem, any shape) and, for discovery in clients that only
list concrete resources, once per problem (best:// at the bench shape).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.mcpserver.resources import FunctionResource

from kernels import get_problem, problem_names
from server.models import jsonable
from server.service import Service, UnknownInput

_KINDS: dict[str, tuple[str, str]] = {
    "description": ("text/markdown", "what to compute, shapes, tolerance and baseline"),
    "reference": ("text/x-python", "the reference implementation the candidate is checked against"),
    "starter": ("text/x-python", "a simple, correct Triton candidate to start from"),
    "shapes": ("application/json", "shapes, check shapes, tolerance, dtypes, FLOPs and bytes"),
}


def problem_text(service: Service, name: str, kind: str) -> str:
    try:
        service.resolve(name, None)
        if kind == "description":
            return get_problem(name).description
        if kind == "shapes":
            return json.dumps(jsonable(get_problem(name).describe()), indent=2)
        return service.problem_source(name, kind)
    except UnknownInput as exc:
        raise ResourceNotFoundError(str(exc.args[0] if exc.args else exc)) from None


def best_text(service: Service, problem: str, shape: str) -> str:
    try:
        found = service.best(problem, shape)
    except UnknownInput as exc:
        raise ResourceNotFoundError(str(exc.args[0] if exc.args else exc)) from None
    if found is None:
        return no_best_text(problem, shape)
    numbers = [f"attempt {found['id']}", f"outcome {found.get('outcome')}", f"device {found.get('device')}",
               f"verified {found.get('verification') or 'yes'}"]
    for key, fmt in (("median_us", "{:.2f} us"), ("speedup", "{:.2f}x"), ("max_rel_err", "max rel err {:.1e}")):
        value = jsonable(found.get(key))
        if value is not None:
            numbers.append(fmt.format(value))
    header = f"# best for {problem}/{shape}: " + ", ".join(numbers) + "\n"
    return header + (found.get("source") or "# (source not stored)\n")


def no_best_text(problem: str, shape: str) -> str:
    """The answer while nothing is verified: best://{name}/bench is listed from the start, so reading it must not
    be an error. Comments only, so the text stays the Python file its mime type says, and its first line reads
    like a found best's (`# best for P/S: ...`), saying none."""
    return (f"# best for {problem}/{shape}: none (no verified attempt yet)\n"
            "# Only attempts the judge verified count: a correct profile on a GPU, timed and censused.\n"
            f"# Start from problem://{problem}/starter.\n")


def register_resources(app: MCPServer, service: Service) -> None:
    for kind, (mime, what) in _KINDS.items():
        def read(name: str, kind: str = kind) -> str:
            return problem_text(service, name, kind)

        # The template's function takes exactly the URI's variables; `kind` is bound above.
        app.resource(f"problem://{{name}}/{kind}", name=f"problem-{kind}", title=f"Problem {kind}",
                     description=f"{what} (any problem)", mime_type=mime)(_only_name(read))
        for name in problem_names():
            app.add_resource(FunctionResource.from_function(
                _bound(problem_text, service, name, kind), uri=f"problem://{name}/{kind}",
                name=f"{name}-{kind}", title=f"{name}: {kind}", description=f"{name}: {what}", mime_type=mime))

    def read_best(problem: str, shape: str) -> str:
        return best_text(service, problem, shape)

    app.resource("best://{problem}/{shape}", name="best", title="Best kernel so far",
                 description="the best verified correct kernel in the event log for a problem and shape, numbers "
                 "on top",
                 mime_type="text/x-python")(read_best)
    for name in problem_names():
        app.add_resource(FunctionResource.from_function(
            _bound(best_text, service, name, "bench"), uri=f"best://{name}/bench", name=f"{name}-best",
            title=f"{name}: best kernel so far (bench)", description=f"the best verified correct {name} "
            "kernel at the bench shape", mime_type="text/x-python"))


def _only_name(read: Callable[..., str]) -> Callable[[str], str]:
    def by_name(name: str) -> str:
        return read(name)

    return by_name


def _bound(fn: Callable[..., str], *args: Any) -> Callable[[], str]:
    """`fn(*args)` as a zero-argument function (a concrete resource's reader takes no arguments)."""
    def read() -> str:
        return fn(*args)

    return read
