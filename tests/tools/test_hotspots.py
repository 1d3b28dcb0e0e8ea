"""Stall samples per source line (tools/hotspots.py): ncu's source page (tools/ncu_source_page.py) joined with
nvdisasm's line table (tools/sass_lines.py).

The recorded run under tests/fixtures/hotspots/softmax is `marathon hotspots kernels/softmax/starter.py
--problem softmax --shape bench --save DIR` on an H200: ncu's source page, the cubin that ran and the
candidate as ncu saw it. The join is exercised on it with the nvdisasm that ships inside Triton.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.hotspots import CANDIDATE_NAME, hotspots
from tools.ncu import find_ncu
from tools.ncu_source_page import parse_source_page
from tools.sass_lines import disassemble, line_table

ROOT = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "hotspots" / "softmax"
KERNEL = "softmax_row_kernel"

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "L1 Wavefronts Shared", "stall_long_sb",
          "stall_wait", "stall_long_sb (Not Issued)"]


def _page(blocks: list[tuple[str, list[list[str]]]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL)
    for name, rows in blocks:
        writer.writerow(["Kernel Name", name, ""])
        writer.writerow(HEADER)
        writer.writerows(rows)
    return out.getvalue()


def test_source_page_offsets_are_relative_and_launches_of_one_kernel_add_up() -> None:
    a = [["0x7f0000001000", "LDG", "10", "0", "7", "1", "99"], ["0x7f0000001010", "FADD", "4", "2", "0", "3", "0"]]
    a_again = [["0x7f0000009000", "LDG", "1", "0", "1", "0", "0"], ["0x7f0000009010", "FADD", "2", "0", "0", "2", "0"]]
    b = [["0x7f0000005000", "EXIT", "5", "0", "0", "5", "0"]]
    kernels = parse_source_page(_page([("ka", a), ("kb", b), ("ka", a_again)]))
    assert set(kernels) == {"ka", "kb"}
    ka = kernels["ka"]
    assert ka.samples == {0: 11, 0x10: 6}
    assert ka.shared_wavefronts == {0: 0, 0x10: 2}
    assert ka.stalls[0] == {"long_sb": 8, "wait": 1}  # the "(Not Issued)" subset is not counted twice
    assert kernels["kb"].samples == {0: 5}


def test_line_table_names_the_line_of_every_instruction_after_its_comment() -> None:
    listing = """
        .text.k:
        //## File "/tmp/x/candidate.py", line 12
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
        //## File "/usr/lib/triton/language/standard.py", line 293
        /*0020*/                   SHFL.BFLY PT, R3, R2, 0x10, 0x1f ;
"""
    assert line_table(listing) == {0: ("/tmp/x/candidate.py", 12), 0x10: ("/tmp/x/candidate.py", 12),
                                   0x20: ("/usr/lib/triton/language/standard.py", 293)}


@pytest.fixture(scope="module")
def recorded() -> tuple[dict, dict, str]:
    kernels = parse_source_page((RECORDED / "source_page.csv").read_text())
    table = line_table(disassemble(RECORDED / f"{KERNEL}.cubin"))
    return kernels, table, (RECORDED / CANDIDATE_NAME).read_text()


def test_every_sampled_instruction_of_the_recorded_run_has_a_source_line(recorded: tuple) -> None:
    kernels, table, _ = recorded
    assert KERNEL in kernels
    offsets = set(kernels[KERNEL].samples)
    assert offsets and offsets <= set(table)  # the cubin is the one ncu sampled: same instruction offsets


def test_recorded_hotspots_name_the_candidates_lines_and_the_library_functions(recorded: tuple) -> None:
    kernels, table, source = recorded
    result = hotspots(kernels[KERNEL], table, source, top=100)
    rows = result["lines"]
    assert result["samples"] == sum(kernels[KERNEL].samples.values()) > 0
    assert sum(r["samples"] for r in rows) == result["samples"]  # every sample lands on some line
    assert abs(sum(r["share_pct"] for r in rows) - 100.0) < 0.5
    assert [r["share_pct"] for r in rows] == sorted((r["share_pct"] for r in rows), reverse=True)
    own = [r for r in rows if r["line"] is not None]
    assert own and all(r["text"] == source.splitlines()[r["line"] - 1].strip() for r in own)
    assert any("tl.load" in r["text"] for r in own)
    library = [r for r in rows if r["line"] is None]
    assert {r["function"] for r in library} & {"sum", "max", "_sum_combine", "_elementwise_max", "maximum"}
    for r in rows:
        assert sum(r["stalls_pct"].values()) <= 100.0 + 1e-6


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MARATHON_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "cli", "hotspots", *args, "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_refuses_a_candidate_that_breaks_the_rules(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import flash_attn\n\ndef entry(x):\n    return x\n")
    proc = _cli(tmp_path, str(bad), "--problem", "softmax")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["ok"] is False
    assert any("flash_attn" in e["message"] for e in report["errors"])


@pytest.mark.skipif(find_ncu() is not None, reason="ncu is installed here")
def test_cli_says_clearly_when_ncu_is_missing(tmp_path: Path) -> None:
    proc = _cli(tmp_path, str(ROOT / "kernels" / "softmax" / "starter.py"), "--problem", "softmax", "--shape", "small")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1
    # The MCP tool's result, field for field (kernels: none listed)
    assert report == {"problem": "softmax", "shape": "small", "ok": False, "kernels": [],
                      "error": "ncu (Nsight Compute) is not installed here"}


@pytest.mark.gpu
@pytest.mark.skipif(find_ncu() is None, reason="needs ncu")
def test_hotspots_of_the_softmax_starter_on_the_gpu(tmp_path: Path) -> None:
    """Also when Triton's cache already holds the same kernel built from another file (its line table
    would name that file): the candidate's lines still read as the candidate's."""
    from tools.hotspots import ncu_hotspots

    source = (ROOT / "kernels" / "softmax" / "starter.py").read_text()
    elsewhere = tmp_path / "same_kernel_elsewhere.py"
    elsewhere.write_text(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", "import importlib.util, torch; "
                    f"s = importlib.util.spec_from_file_location('m', {str(elsewhere)!r}); "
                    "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
                    "m.entry(torch.randn(64, 1000, device='cuda'))"], env=env, check=True, timeout=300)
    result = ncu_hotspots("softmax", source, "bench", top=5)
    assert result["ok"], result
    (kernel,) = result["kernels"]
    assert kernel["kernel"] == KERNEL and kernel["samples"] > 0
    assert any(r["line"] is not None for r in kernel["lines"])
    assert not any("same_kernel_elsewhere" in (r.get("library") or "") for r in kernel["lines"])


def test_the_mcp_tool_reports_a_refusal_as_a_tool_error_and_logs_the_call(tmp_path: Path) -> None:
    import anyio
    from mcp import Client

    from server.app import build_app
    from server.service import Service
    from state import EventLog

    service = Service(log=EventLog(tmp_path / "marathon.db"), cache_dir=tmp_path / "cache")
    try:
        async def main() -> Any:
            async with Client(build_app(service)) as c:
                return await c.call_tool("hotspots", {"problem": "softmax", "source": "import flash_attn\n"})

        result = anyio.run(main)
        assert result.is_error
        report = result.structured_content
        assert report["ok"] is False and report["problem"] == "softmax" and report["shape"] == "bench"
        assert any("flash_attn" in e["message"] for e in report["errors"])
        kinds = [(e.kind, e.payload.get("tool")) for e in service.log.events()]
        assert ("tool.intent", "hotspots") in kinds and ("tool.result", "hotspots") in kinds
    finally:
        service.close()


@pytest.mark.gpu
@pytest.mark.skipif(find_ncu() is None, reason="needs ncu")
def test_the_mcp_tool_on_the_gpu(tmp_path: Path) -> None:
    import anyio
    from mcp import Client

    from server.app import build_app
    from server.service import Service
    from state import EventLog

    service = Service(log=EventLog(tmp_path / "marathon.db"), cache_dir=tmp_path / "cache")
    try:
        async def main() -> Any:
            async with Client(build_app(service)) as c:
                source = (ROOT / "kernels" / "softmax" / "starter.py").read_text()
                return await c.call_tool("hotspots", {"problem": "softmax", "top": 3, "source": source})

        result = anyio.run(main)
        assert not result.is_error, result.content
        (kernel,) = result.structured_content["kernels"]
        assert kernel["kernel"] == KERNEL and 1 <= len(kernel["lines"]) <= 3
        assert KERNEL in result.content[0].text
    finally:
        service.close()
