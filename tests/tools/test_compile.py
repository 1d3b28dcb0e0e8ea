"""`compile` on a machine with no GPU: real capture under the interpreter, real sm_90 compilation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernels import problem_names, starter_path
from tools import guard
from tools.compiler import compile_candidate

SOFTMAX = starter_path("softmax").read_text()


@pytest.mark.parametrize("problem", problem_names())
def test_every_starter_compiles_for_hopper_at_bench(problem: str, tmp_path: Path) -> None:
    r = compile_candidate(problem, starter_path(problem).read_text(), "bench", cache_dir=tmp_path)
    assert r.ok, r.errors
    assert r.target == "cuda:sm_90" and r.errors == []
    for k in r.kernels:
        assert k.registers > 0 and k.registers <= 255
        assert k.spill_bytes >= 0 and k.shared_bytes >= 0
        assert isinstance(k.uses_wgmma, bool) and k.num_warps >= 1
        assert k.sass_instructions > 10


def test_compile_is_cached_by_source(tmp_path: Path) -> None:
    first = compile_candidate("softmax", SOFTMAX, "bench", cache_dir=tmp_path)
    second = compile_candidate("softmax", SOFTMAX, "bench", cache_dir=tmp_path)
    assert not first.cached and second.cached
    assert first.kernels == second.kernels
    other = compile_candidate("softmax", SOFTMAX.replace("NUM_WARPS = 8", "NUM_WARPS = 4"), "bench",
                              cache_dir=tmp_path)
    assert not other.cached and other.kernels[0].num_warps == 4


def test_constexprs_and_specialisation_follow_the_shape(tmp_path: Path) -> None:
    bench = compile_candidate("softmax", SOFTMAX, "bench", cache_dir=tmp_path).kernels[0]
    small = compile_candidate("softmax", SOFTMAX, "small", cache_dir=tmp_path).kernels[0]
    assert bench.constexprs["BLOCK"] == 8192 and small.constexprs["BLOCK"] == 256
    assert bench.grid == [4096]


def test_asm_on_request(tmp_path: Path) -> None:
    r = compile_candidate("softmax", SOFTMAX, "small", want_asm=True, cache_dir=tmp_path)
    k = r.kernels[0]
    assert ".target sm_90" in k.ptx and "EXIT" in k.sass


def test_instruction_count_of_a_kernel_past_64_kb_of_code(tmp_path: Path) -> None:
    """The KDA Triton prep kernel with its gate inside is over 4096 instructions: SASS offsets of five hex digits
    count too."""
    source = (Path(__file__).resolve().parents[2] / "kernels" / "kda" / "solution.py").read_text()
    assert "\nGATE_APART = 1\n" in source
    source = source.replace("\nGATE_APART = 1\n", "\nGATE_APART = 0\n")
    r = compile_candidate("kda", source, "bench", want_asm=True, cache_dir=tmp_path)
    prep = next(k for k in r.kernels if k.name == "kda_chunk_prep_full_kernel")
    last_offset = int(re.findall(r"/\*([0-9a-f]+)\*/\s+EXIT", prep.sass)[-1], 16)
    assert prep.sass_instructions > 4096
    assert prep.sass_instructions >= last_offset // 16 + 1  # sm_90 instructions are 16 bytes, from offset 0


def test_instructions_by_source_line_add_up_and_name_what_they_are(tmp_path: Path) -> None:
    plain = compile_candidate("softmax", SOFTMAX, "bench", cache_dir=tmp_path)
    r = compile_candidate("softmax", SOFTMAX, "bench", want_lines=True, cache_dir=tmp_path)
    assert not r.cached and "lines" not in plain.kernels[0].model_fields_set  # its own cache entry, asked for
    (k,) = r.kernels
    rows = k.lines
    assert sum(row.instructions for row in rows) == k.sass_instructions  # every instruction, once
    source_lines = SOFTMAX.splitlines()
    own = {row.line: row for row in rows if row.line is not None}
    assert all(row.text == source_lines[n - 1].strip() for n, row in own.items())
    load = next(row for row in own.values() if row.text.startswith("x = tl.load("))
    exp = next(row for row in own.values() if row.text.startswith("e = tl.exp("))
    assert load.global_ops >= 1 and load.mufu == 0 and exp.mufu >= 1 and exp.global_ops == 0
    reductions = [row for row in rows if row.line is None and row.function in ("max", "sum")]
    assert reductions and all(row.shuffles > 0 for row in reductions)  # 8 warps: a cross-warp reduction


def test_compile_error_points_at_the_kernel_line(tmp_path: Path) -> None:
    src = SOFTMAX.replace("    e = tl.exp(x)\n", "    e = tl.exp(undefined_name)\n")
    r = compile_candidate("softmax", src, "small", cache_dir=tmp_path)
    assert not r.ok and r.error_class in {"compile_error", "capture_error"}
    line = next(i for i, t in enumerate(src.splitlines(), 1) if "undefined_name" in t)
    assert any(e.line == line for e in r.errors), r.errors
    assert all("site-packages" not in e.message for e in r.errors)


def test_error_inside_a_jit_helper_names_the_fault_and_the_calls(tmp_path: Path) -> None:
    """Triton raises one CompilationError a call level; the report must carry the innermost one's reason and
    line (here a rank-1 tl.dot two helpers down), then the lines of the calls that led there."""
    helpers = ("@triton.jit\ndef _bad_dot(x):\n    return tl.dot(x, x)\n\n\n"
               "@triton.jit\ndef _exp_plus(x):\n    return tl.exp(x) + _bad_dot(x)\n\n\n")
    src = SOFTMAX.replace("@triton.jit\ndef softmax_row_kernel", helpers + "@triton.jit\ndef softmax_row_kernel")
    src = src.replace("    e = tl.exp(x)\n", "    e = _exp_plus(x)\n")
    r = compile_candidate("softmax", src, "small", cache_dir=tmp_path)
    assert not r.ok and r.error_class == "compile_error"
    lines = src.splitlines()

    def line_of(text: str) -> int:
        return next(i for i, t in enumerate(lines, 1) if text in t)

    (err,) = r.errors
    assert err.line == line_of("return tl.dot(x, x)") and "rank" in err.message
    assert err.message.endswith(f"called from line {line_of('+ _bad_dot(x)')}, line {line_of('e = _exp_plus(x)')}")


def test_a_static_assert_in_a_helper_is_reported_with_its_message(tmp_path: Path) -> None:
    """CompileTimeAssertionFailure, a subclass of CompilationError, ends the chain with its own message."""
    helper = "@triton.jit\ndef _checked(x):\n    tl.static_assert(x.shape[0] < 0, 'rows must be negative')\n" \
             "    return x\n\n\n"
    src = SOFTMAX.replace("@triton.jit\ndef softmax_row_kernel", helper + "@triton.jit\ndef softmax_row_kernel")
    src = src.replace("    e = tl.exp(x)\n", "    e = tl.exp(_checked(x))\n")
    r = compile_candidate("softmax", src, "small", cache_dir=tmp_path)
    (err,) = r.errors
    lines = src.splitlines()
    assert "rows must be negative" in err.message
    assert err.line == next(i for i, t in enumerate(lines, 1) if "tl.static_assert" in t)


def test_compilation_chain_is_resolved_from_the_file_without_the_module(tmp_path: Path) -> None:
    """At a launch inside the worker only the file is at hand: each level's function is found by its text."""
    from tools.candidate import describe_exception

    class CompilationError(Exception):  # the shape of Triton's: a node with a lineno, the function's source
        def __init__(self, src: str, lineno: int, message: str) -> None:
            super().__init__(message)
            self.src, self.node = src, type("Node", (), {"lineno": lineno})()

    helper = "def helper(x):\n    y = x + 1\n    return tl.dot(y, y)\n"
    kernel = "def kernel(p):\n    x = tl.load(p)\n    z = helper(x)\n"
    path = tmp_path / "cand.py"
    path.write_text("import triton\n\n\n@triton.jit\n" + helper + "\n\n@triton.jit\n" + kernel)
    inner = CompilationError(helper, 3, "at 3:11: rank mismatch")
    outer = CompilationError(kernel, 3, "at 3:8:")
    outer.__cause__ = inner
    d = describe_exception(outer, path)
    lines = path.read_text().splitlines()
    dot, call = (lines.index(t) + 1 for t in ("    return tl.dot(y, y)", "    z = helper(x)"))
    assert d["line"] == dot and "rank mismatch" in d["message"] and d["message"].endswith(f"called from line {call}")


def test_type_error_in_tl_dot_is_reported(tmp_path: Path) -> None:
    src = SOFTMAX.replace("    e = tl.exp(x)\n", "    e = tl.exp(x)\n    bad = tl.dot(x, x)\n")
    r = compile_candidate("softmax", src, "small", cache_dir=tmp_path)
    assert not r.ok and r.error_class == "compile_error"
    line = next(i for i, t in enumerate(src.splitlines(), 1) if "tl.dot(x, x)" in t)
    assert r.errors[0].line == line and "rank" in r.errors[0].message


def test_rejected_before_compiling(tmp_path: Path) -> None:
    r = compile_candidate("softmax", "import flashinfer\n" + SOFTMAX, "small", cache_dir=tmp_path)
    assert r.error_class == "rejected" and r.errors[0].line == 1


def test_syntax_error(tmp_path: Path) -> None:
    r = compile_candidate("softmax", SOFTMAX + "\ndef broken(:\n", "small", cache_dir=tmp_path)
    assert r.error_class == "syntax_error" and r.errors[0].line is not None


def test_no_kernel_launched(tmp_path: Path) -> None:
    src = "import torch\n\n\ndef entry(x):\n    return torch.empty_like(x)\n"
    r = compile_candidate("softmax", src, "small", cache_dir=tmp_path)
    assert r.error_class == "no_kernel" and not r.ok


def test_unknown_shape_is_the_callers_error(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="valid"):
        compile_candidate("softmax", SOFTMAX, "huge", cache_dir=tmp_path)


@pytest.mark.parametrize("source, needle", [
    ("import torch\nfrom fla.ops.kda import chunk_kda\ndef entry(x): pass\n", "fla.ops.kda"),
    ("import torch\ndef entry(x):\n    return torch.softmax(x, -1)\n", "torch.softmax"),
    ("import torch\nimport torch.nn.functional as F\ndef entry(x):\n    return F.softmax(x, -1)\n", "F.softmax"),
    ("import torch\ndef entry(a, b):\n    return a @ b\n", "'@'"),
    ("import torch\ndef entry(x):\n    return x.exp()\n", ".exp()"),
    ("import torch\ndef entry(x):\n    exec('y = 1')\n", "exec"),
    ("import importlib\ndef entry(x):\n    importlib.import_module('fla')\n", "importlib"),
    ("import torch\ndef entry(x):\n    return torch._C._nn.linear(x, x)\n", "torch._C"),
    ("import subprocess\ndef entry(x): pass\n", "subprocess"),
    ("import torch\ndef helper(x): pass\n", "entry"),
])
def test_static_guard_refusals(source: str, needle: str) -> None:
    violations = guard.static_check(source)
    assert violations, source
    assert any(needle in v.message for v in violations), [v.message for v in violations]


def test_static_guard_allows_allocation_views_and_triton() -> None:
    src = (
        "import torch\nimport triton\nimport triton.language as tl\n\n"
        "@triton.jit\ndef k(x, BLOCK: tl.constexpr):\n    y = tl.exp(tl.load(x + tl.arange(0, BLOCK)))\n"
        "    z = tl.dot(y, y)\n\n"
        "def entry(x):\n    out = torch.empty_like(x)\n    buf = torch.zeros(4, device=x.device)\n"
        "    v = x.view(-1).reshape(x.shape).contiguous()\n    n = triton.cdiv(x.numel(), 128)\n"
        "    k[(n,)](x, BLOCK=128)\n    return out\n"
    )
    assert guard.static_check(src) == []


def test_spills_and_shared_memory_beyond_the_sm_limit_are_reported(tmp_path: Path) -> None:
    """A 64x512 fp32 accumulator on 4 warps cannot live in registers, and q's 74 KB tile plus three 74 KB
    stages of the cache tile (295 KB) exceed sm_90's 227 KiB: both must show (a GPU says so only at launch)."""
    from client.tuner import rewrite
    from kernels import solution_path

    path = solution_path("mla_decode")
    assert path is not None
    source = rewrite(path.read_text(), {"BLOCK_H": 64, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 3})
    r = compile_candidate("mla_decode", source, "bench", cache_dir=tmp_path)
    split = next(k for k in r.kernels if k.name == "mla_split_kernel")
    assert split.spill_bytes > 0 and split.spill_instructions > 0
    assert split.shared_bytes > 232448
    assert not r.ok and r.error_class == "compile_error"
    assert any("shared memory" in e.message and e.kernel == "mla_split_kernel" for e in r.errors)
    fits = compile_candidate("mla_decode", rewrite(path.read_text(), {"BLOCK_H": 16, "BLOCK_N": 32, "NUM_WARPS": 8,
                                                                       "NUM_STAGES": 2}), "bench", cache_dir=tmp_path)
    assert fits.ok, fits.errors
    assert all(k.spill_bytes == 0 and k.spill_instructions == 0 for k in fits.kernels)


def test_string_and_dtype_constexprs_are_compiled(tmp_path: Path) -> None:
    """Options passed as constexprs (input_precision="tf32x3", a tl dtype) reach the sm_90 compile."""
    source = SOFTMAX.replace("BLOCK: tl.constexpr):", "BLOCK: tl.constexpr, MODE: tl.constexpr, "
                             "ACC: tl.constexpr):").replace(
        "BLOCK=block, num_warps", "BLOCK=block, MODE=\"tf32x3\", ACC=tl.float32, num_warps")
    assert source != SOFTMAX and "MODE=" in source
    r = compile_candidate("softmax", source, "bench", cache_dir=tmp_path)
    assert r.ok, r.errors
    assert r.kernels[0].constexprs["MODE"] == "tf32x3"
    assert r.kernels[0].constexprs["ACC"] == "fp32"


def test_a_link_the_capture_step_leaves_is_not_written_through(tmp_path: Path) -> None:
    """The capture step runs candidate code in the folder where the trusted side then writes the next step's
    request: a link left in its place (to the token, to the project's code) must not be followed."""
    victim = tmp_path / "precious.txt"
    victim.write_text("untouched")
    plant = (f"import os as _os\nif not _os.path.lexists('aot_request.json'):\n"
             f"    _os.symlink({str(victim)!r}, 'aot_request.json')\n")
    r = compile_candidate("softmax", plant + SOFTMAX, "bench", cache_dir=tmp_path / "cache")
    assert victim.read_text() == "untouched" and not victim.is_symlink()
    assert r.ok, r.errors  # the request went into a file of its own, and the step read it


def test_write_new_replaces_a_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    from tools.written import write_new

    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (tmp_path / "request.json").symlink_to(victim)
    write_new(tmp_path / "request.json", "{}")
    assert victim.read_text() == "untouched"
    assert (tmp_path / "request.json").read_text() == "{}" and not (tmp_path / "request.json").is_symlink()


def test_a_module_the_capture_step_plants_is_not_imported_by_the_next_step(tmp_path: Path) -> None:
    """The capture step may write its folder: a `tools/aot.py` planted there was imported by `python -m tools.aot`
    started in that folder, and ran as the server's user before its sandbox closed."""
    marker = tmp_path / "planted-ran"
    payload = f"open({str(marker)!r}, 'w').write('ran')\\nraise SystemExit(0)\\n"
    plant = ("import os as _os\n"
             "if _os.path.exists('capture_request.json'):\n"
             "    _os.makedirs('tools', exist_ok=True)\n"
             "    open('tools/__init__.py', 'w').write('')\n"
             f"    open('tools/aot.py', 'w').write({payload!r})\n"
             f"    open('json.py', 'w').write({payload!r})\n")
    r = compile_candidate("softmax", plant + SOFTMAX, "bench", cache_dir=tmp_path / "cache")
    assert not marker.exists()
    assert r.ok and r.kernels, r.errors  # the project's own AOT step compiled the kernel


def test_no_process_the_candidate_starts_outlives_its_compile_step(tmp_path: Path) -> None:
    """A daemon (fork, setsid, fork, exec) from the candidate's module code, in each step: reaped with the step."""
    import os
    import time

    tag = f"marathon-daemon-{os.getpid()}-{time.monotonic_ns()}"
    daemon = ("import os as _os\n"
              "if _os.fork() == 0:\n"
              "    _os.setsid()\n"
              "    if _os.fork() == 0:\n"
              f"        _os.execvp('sleep', [{tag!r}, '120'])\n"  # its name in ps: the tag
              "    _os._exit(0)\n")
    compile_candidate("softmax", daemon + SOFTMAX, "bench", cache_dir=tmp_path / "cache")
    alive = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and tag.encode() in (Path("/proc") / pid / "cmdline").read_bytes():
                alive.append(int(pid))
        except OSError:
            continue
    for pid in alive:
        os.kill(pid, 9)
    assert alive == []
