"""Candidates written in Gluon (triton.experimental.gluon: explicit layouts, the way to warp specialisation
and TMA pipelines on Hopper) or taking host-side TMA descriptors: the guard reads them as Triton, `compile`
records their launches and builds them for sm_90 without a GPU, and a profile of a Gluon kernel on a machine
without a GPU says plainly that it needs one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernels import starter_path
from tools import guard
from tools.compiler import compile_candidate
from tools.pool import WorkerPool

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GLUON_SOFTMAX = (FIXTURES / "gluon_softmax.py").read_text()


def test_the_guard_reads_a_gluon_kernel_as_triton() -> None:
    assert guard.static_check(GLUON_SOFTMAX) == []
    host_compute = GLUON_SOFTMAX.replace("    return out\n", "    return out.exp()\n")
    (violation,) = guard.static_check(host_compute)
    assert "torch compute" in violation.message


def test_only_triton_s_own_decorators_make_a_kernel() -> None:
    """A look-alike decorator (its name containing "gluon" or "jit") does not exempt torch compute in its body."""
    lookalike = GLUON_SOFTMAX.replace("def entry(", "def not_gluon_jit(f):\n    return f\n\n\n@not_gluon_jit\n"
                                      "def helper(x):\n    return x.exp()\n\n\ndef entry(")
    (violation,) = guard.static_check(lookalike)
    assert "torch compute" in violation.message


def test_compile_builds_a_gluon_kernel_for_hopper(tmp_path: Path) -> None:
    r = compile_candidate("softmax", GLUON_SOFTMAX, "bench", want_lines=True, cache_dir=tmp_path)
    assert r.ok, r.errors
    (k,) = r.kernels
    assert k.name == "softmax_row_kernel" and k.num_warps == 4 and 0 < k.registers <= 255
    assert k.constexprs["WARPS"] == 4 and k.sass_instructions > 10
    exp = next(row for row in k.lines if row.text == "e = gl.exp(x)")
    assert exp.mufu >= 1 and exp.line == 1 + GLUON_SOFTMAX.splitlines().index("    e = gl.exp(x)")


def test_compile_takes_a_gluon_layout_from_the_host(tmp_path: Path) -> None:
    """A layout built on the host and passed as a constexpr (here a slice of a 2-D parent, nested) is recorded
    as data and rebuilt for the compile."""
    edits = [("    layout: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])\n", ""),
             ("WARPS: gl.constexpr):", "WARPS: gl.constexpr, layout: gl.constexpr):"),
             ("num_warps=NUM_WARPS)", "num_warps=NUM_WARPS, layout=LAYOUT)"),
             ("NUM_WARPS = 4\n",
              "NUM_WARPS = 4\nLAYOUT = gl.SliceLayout(0, gl.BlockedLayout([1, 1], [1, 32], [1, 4], [1, 0]))\n")]
    source = GLUON_SOFTMAX
    for old, new in edits:
        assert old in source
        source = source.replace(old, new)
    r = compile_candidate("softmax", source, "bench", cache_dir=tmp_path)
    assert r.ok, r.errors
    (k,) = r.kernels
    assert k.name == "softmax_row_kernel" and k.registers > 0


@pytest.mark.parametrize("fixture", ["tma_softmax.py", "gluon_tma_softmax.py"])
def test_compile_takes_host_side_tma_descriptors(fixture: str, tmp_path: Path) -> None:
    """Triton's and Gluon's descriptors are recorded by what compiling needs (dtype, block, strides, Gluon's
    shared layout) and rebuilt over a stand-in base: the kernel is compiled against the same descriptor type."""
    source = (FIXTURES / fixture).read_text()
    assert guard.static_check(source) == []
    r = compile_candidate("softmax", source, "small", cache_dir=tmp_path)
    assert r.ok, r.errors
    (k,) = r.kernels
    assert k.uses_tma and k.signature["x_desc"].startswith("tensordesc<fp32[1, 256]")
    if fixture.startswith("gluon"):
        assert "NVMMASharedLayout" in k.signature["x_desc"] and k.shared_bytes >= 1024  # the row's tile


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory):
    with WorkerPool(root=tmp_path_factory.mktemp("workers")) as p:
        p.warm()
        yield p


@pytest.mark.parametrize("autotuned", [False, True])
def test_a_cpu_profile_of_a_gluon_kernel_says_it_needs_a_gpu(pool: WorkerPool, autotuned: bool) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the kernel runs")
    source = GLUON_SOFTMAX
    if autotuned:  # found behind the autotuner's wrapper too
        source = source.replace("@gluon.jit\n", "@triton.autotune(configs=[triton.Config({})], key=['cols'])\n"
                                "@gluon.jit\n")
        assert "triton.autotune" in source
    r = pool.run({"op": "profile", "problem": "softmax", "shape": "small", "source": source,
                  "timing": False}, timeout=120.0)
    assert r["ok"] is False and r["error_class"] == "needs_gpu"
    assert "launched the Gluon kernel softmax_row_kernel" in r["error"] and "GPU" in r["error"]
    after = pool.run({"op": "profile", "problem": "softmax", "shape": "small",
                      "source": starter_path("softmax").read_text(), "timing": False}, timeout=120.0)
    assert after["correct"] is True  # the worker goes on


def test_a_candidate_with_triton_kernels_off_the_gpu_is_checked_there(pool: WorkerPool) -> None:
    """Defining a Gluon kernel is not refused, launching one without a GPU is: a candidate whose entry() takes a
    Triton kernel on the CPU (as the project's solutions do) is checked under the interpreter."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the Gluon kernel runs")
    fallback = ('@triton.jit\n'
                'def softmax_row_triton(x_ptr, out_ptr, cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):\n'
                '    row = tl.program_id(0)\n'
                '    offs = tl.arange(0, BLOCK)\n'
                '    mask = offs < cols\n'
                '    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=-float("inf")).to(tl.float32)\n'
                '    e = tl.exp(x - tl.max(x, axis=0))\n'
                '    y = (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty)\n'
                '    tl.store(out_ptr + row * out_row_stride + offs, y, mask=mask)\n\n\n')
    dispatch = ('    if not x.is_cuda:\n'
                '        softmax_row_triton[(rows,)](x, out, cols, x.stride(0), out.stride(0), '
                'BLOCK=triton.next_power_of_2(cols))\n'
                '        return out\n')
    source = GLUON_SOFTMAX.replace("import triton\n", "import triton\nimport triton.language as tl\n")
    source = source.replace("def entry(", fallback + "def entry(")
    source = source.replace("    out = torch.empty_like(x)\n", "    out = torch.empty_like(x)\n" + dispatch)
    assert source.count("softmax_row_triton") == 2 and "import triton.language as tl" in source
    r = pool.run({"op": "profile", "problem": "softmax", "shape": "small", "source": source, "timing": False},
                 timeout=120.0)
    assert r["correct"] is True, r.get("error")
    assert r["error_class"] is None and "no GPU" in r["timing_note"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gluon_kernel_is_checked_and_timed_on_the_gpu(pool: WorkerPool) -> None:
    r = pool.run({"op": "profile", "problem": "softmax", "shape": "bench", "source": GLUON_SOFTMAX}, timeout=300.0)
    assert r["correct"], r.get("error")
    assert r["timing"]["median_us"] > 0
