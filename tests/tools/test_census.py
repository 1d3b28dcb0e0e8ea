"""The kernel census's reading of Nsight Compute's output and its verdict on each kernel (no GPU needed)."""

from __future__ import annotations

import pytest

from kernels import starter_path
from tools.census import classify, parse_kernel_names
from tools.guard import kernel_names
from tools.ncu_run import MalformedReport

# The shape of `ncu --csv --metrics gpu__time_duration.sum` output, as the H200 printed it (2026-12-01).
COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
           "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value")
FILL = "void at::vectorized_elementwise_kernel<4, at::FillFunctor<float>, std::array<char *, 1>>(int, T2, T3)"
REDUCE = "void at::reduce_kernel<512, 1, at::ReduceOp<float, at::func_wrapper_t<float>>>(T3)"


def _row(i: int, kernel: str, ns: str) -> str:
    values = (str(i), "602", "python3.12", "127.0.0.1", kernel, "1", "7", "(128, 1, 1)", "(1024, 1, 1)", "0", "9.0",
              "Command line profiler metrics", "gpu__time_duration.sum", "ns", ns)
    return ",".join(f'"{v}"' for v in values)


CSV = "\n".join(["==PROF== Connected to process 602 (/usr/bin/python3.12)", ",".join(f'"{c}"' for c in COLUMNS),
                 _row(0, FILL, "3,104"), _row(1, "softmax_row_kernel", "3,872"),
                 _row(2, "softmax_row_kernel", "4,032"), _row(3, REDUCE, "7,616")]) + "\n"


def test_kernels_are_counted_by_launch() -> None:
    counts = parse_kernel_names(CSV)
    assert counts["softmax_row_kernel"] == 2 and len(counts) == 3


def test_own_triton_kernels_and_fills_pass_torch_compute_is_refused() -> None:
    names = kernel_names(starter_path("softmax").read_text())
    assert names == {"softmax_row_kernel"}
    rows, refused = classify(parse_kernel_names(CSV), names)
    verdicts = {r["name"].split("<")[0]: r["verdict"] for r in rows}
    assert verdicts["softmax_row_kernel"] == "candidate's Triton kernel"
    assert verdicts["void at::vectorized_elementwise_kernel"] == "copy or fill"
    assert refused == [n for n in parse_kernel_names(CSV) if "reduce_kernel" in n]


def test_a_library_kernel_under_a_name_the_candidate_defined_is_still_refused() -> None:
    """A candidate may name a dummy @triton.jit function like cuBLAS's kernel; the name alone does not pass."""
    lib = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_execute_kernel__5x_cublas"
    source = f"import triton\n\n\n@triton.jit\ndef {lib}():\n    pass\n\n\ndef entry(x):\n    return x\n"
    assert kernel_names(source) == {lib}
    _, refused = classify({lib: 1}, kernel_names(source))
    assert refused == [lib]


def test_a_function_decorated_by_something_other_than_triton_is_not_a_kernel() -> None:
    source = "import torch\n\n\n@torch.jit.script\ndef fake(x):\n    return x\n\n\ndef entry(x):\n    return x\n"
    assert kernel_names(source) == set()


def test_the_census_durations_read_from_the_same_csv() -> None:
    from tools.ncu import summarize_csv

    s = summarize_csv(CSV, calls=2)
    assert s is not None
    # Per call: (3.104 + 3.872 + 4.032 + 7.616) us over the two census calls (median per kernel x launches).
    assert abs(s["gpu_time_us_per_call"] - (3.104 + 2 * 3.952 + 7.616) / 2) < 1e-9


def test_census_outputs_are_checked_against_the_reference() -> None:
    import torch

    from kernels import get_problem
    from kernels.spec import as_outputs
    from tools.census import _wrong_outputs

    problem = get_problem("softmax")
    inputs = problem.inputs("small", 3, "cpu")
    right = list(as_outputs(problem.reference(*inputs)))
    assert _wrong_outputs(problem, inputs, [r.to(torch.float32) for r in right]) is None
    assert "output 'out'" in (_wrong_outputs(problem, inputs, [torch.zeros_like(right[0])]) or "")
    assert _wrong_outputs(problem, inputs, None) == "missing or not plain tensors"
    assert _wrong_outputs(problem, inputs, [right[0], right[0]]) == "missing or not plain tensors"


def test_a_cold_median_far_below_its_kernels_under_ncu_is_refused() -> None:
    from server.service import CENSUS_TIME_RATIO, _census_time_disagrees
    from tools.reports import ProfileResult

    def profiled(**timing: object) -> ProfileResult:
        return ProfileResult.model_validate({"problem": "mla_decode", "shape": "bench", "ok": True, "timing": timing})

    census = {"status": "passed", "kernel_us_per_call": 20.0}
    assert _census_time_disagrees(profiled(median_us=19.5), census) is None
    assert _census_time_disagrees(profiled(median_us=20.0 * CENSUS_TIME_RATIO * 1.01), census) is None
    why = _census_time_disagrees(profiled(median_us=2.0), census)
    assert why is not None and "under-report" in why
    # Warm timings and censuses without durations (older log entries) are not compared.
    assert _census_time_disagrees(profiled(median_us=2.0, l2="warm"), census) is None
    assert _census_time_disagrees(profiled(median_us=2.0), {"status": "passed"}) is None


def test_a_cold_median_far_above_its_kernels_under_ncu_is_refused() -> None:
    """A census that saw one trivial kernel while the timed calls took far longer: the work ran elsewhere under the
    census (a host stand-in, a child) and in something else when timed."""
    from server.service import CENSUS_CALL_ALLOWANCE_US, CENSUS_LAUNCH_ALLOWANCE_US, _census_time_disagrees
    from tools.reports import ProfileResult

    def profiled(**timing: object) -> ProfileResult:
        return ProfileResult.model_validate({"problem": "softmax", "shape": "bench", "ok": True, "timing": timing})

    honest = {"status": "passed", "calls": 2, "kernel_us_per_call": 64.1,
              "kernels": [{"name": "softmax_row_kernel", "launches": 2}]}
    # The H200's honest figures: the median within a few per cent of the census's kernels.
    assert _census_time_disagrees(profiled(median_us=66.0, mode="cuda_graph"), honest) is None
    stand_in = {**honest, "kernel_us_per_call": 2.0}
    why = _census_time_disagrees(profiled(median_us=140.0, mode="cuda_graph"), stand_in)
    assert why is not None and "did not see" in why
    # The allowance: the kernels at the census's ratio, a call's fixed cost and each launch's, more when eager.
    edge = 2.0 / 0.6 + CENSUS_CALL_ALLOWANCE_US + CENSUS_LAUNCH_ALLOWANCE_US["cuda_graph"]
    assert _census_time_disagrees(profiled(median_us=edge * 0.99, mode="cuda_graph"), stand_in) is None
    assert _census_time_disagrees(profiled(median_us=edge * 1.01, mode="cuda_graph"), stand_in) is not None
    assert _census_time_disagrees(profiled(median_us=edge * 1.01, mode="eager"), stand_in) is None
    many = {**honest, "kernel_us_per_call": 100.0, "kernels": [{"name": "k", "launches": 100}]}  # 50 a call
    assert _census_time_disagrees(profiled(median_us=1500.0, mode="eager"), many) is None  # host-bound launches
    # Warm timings and censuses without durations or calls are not compared.
    assert _census_time_disagrees(profiled(median_us=140.0, mode="cuda_graph", l2="warm"), stand_in) is None
    assert _census_time_disagrees(profiled(median_us=140.0), {"status": "passed", "kernel_us_per_call": 2.0}) is None


def test_rows_printed_by_the_candidate_ahead_of_ncus_report_are_refused() -> None:
    """The forgery a shared stdout allowed: a header, then the candidate's own kernel under every ID, so that ncu's
    real rows (a reduction here) were dropped as repeats."""
    fake = "\n".join([",".join(f'"{c}"' for c in COLUMNS)] + [_row(i, "softmax_row_kernel", "1") for i in range(8)])
    with pytest.raises(MalformedReport, match="header"):
        parse_kernel_names(fake + "\n" + CSV)
