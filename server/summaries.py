"""Short human-readable summaries that accompany every structured tool result.

Some clients show the model only the text content, so each summary carries the numbers an agent
acts on (verdict, error and line, time, speedup, registers) and says where the rest is. A job's summary reads
its report's `as_dict()` (the fields the work set), the same value the log keeps.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _num(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return format(value, fmt)


def compile_text(r: dict[str, Any]) -> str:
    head = (f"compile {r.get('problem')}/{r.get('shape')} for {r.get('target', '?')}: "
            + ("ok" if r.get("ok") else f"FAILED [{r.get('error_class')}]")
            + (" (cached)" if r.get("cached") else ""))
    lines = [head]
    for k in r.get("kernels") or []:
        lines.append(f"  {k.get('name')}: {k.get('registers')} regs, {k.get('spill_bytes')} B spilled, "
                     f"{k.get('shared_bytes')} B shared, warps={k.get('num_warps')} "
                     f"stages={k.get('num_stages')}, wgmma={'yes' if k.get('uses_wgmma') else 'no'}, "
                     f"tma={'yes' if k.get('uses_tma') else 'no'}")
        if k.get("lines"):
            lines.append(f"    {'instr':>6} {'shared':>6} {'bar':>4} {'shfl':>4} {'mma':>4} {'global':>6} {'spill':>5} "
                         f"{'mufu':>4}  source")
            for row in k["lines"]:
                where = f"line {row['line']}" if row.get("line") else f"{row.get('library')} ({row.get('function')})"
                lines.append(f"    {row['instructions']:6d} {row['shared']:6d} {row['barriers']:4d} "
                             f"{row['shuffles']:4d} {row['mma']:4d} {row['global']:6d} {row['local']:5d} "
                             f"{row['mufu']:4d}  {where}: {row.get('text', '')[:60]}")
        if k.get("sass"):
            lines.append(k["sass"])
    for e in r.get("errors") or []:
        where = f"line {e['line']}: " if e.get("line") else ""
        lines.append(f"  error: {where}{e.get('message')}")
    if r.get("attempt_id") is not None:
        lines.append(f"  logged as attempt {r['attempt_id']}")
    return "\n".join(lines)


def profile_text(r: dict[str, Any]) -> str:
    dev = r.get("device") or {}
    verdict = "correct" if r.get("correct") else f"NOT OK [{r.get('error_class')}]"
    lines = [f"profile {r.get('problem')}/{r.get('shape')} on {dev.get('name', '?')}: {verdict}"]
    if r.get("error"):
        where = f" (line {r['error_line']})" if r.get("error_line") else ""
        lines.append(f"  error{where}: {r['error']}")
    if r.get("max_rel_err") is not None:
        shapes = ", ".join(r.get("shapes_checked") or [])
        trials = f" over {len(r['trials'])} trials" if r.get("trials") else ""
        lines.append(f"  max relative error {_num(r['max_rel_err'], '.2e')}{trials}{' at ' + shapes if shapes else ''}")
    t = r.get("timing")
    if t:
        lines.append(f"  time {_num(t.get('median_us'), '.2f')} us median ({t.get('mode')}, "
                     f"L2 {t.get('l2') or 'cold'}, {t.get('reps')} reps, IQR {_num(t.get('spread_pct'), '.1f')}%)")
        b = r.get("baseline") or {}
        if b.get("median_us"):
            lines.append(f"  baseline {b.get('name')}: {_num(b['median_us'], '.2f')} us -> speedup "
                         f"{_num(r.get('speedup'), '.2f')}x")
        elif b.get("error"):
            lines.append(f"  baseline: {b['error']}")
        a = r.get("achieved") or {}
        if a.get("gbps") is not None:
            share = f" ({100 * a['dram_share']:.0f}% of measured DRAM bandwidth)" if a.get("dram_share") else ""
            lines.append(f"  {_num(a['gbps'], '.0f')} GB/s{share}, {_num(a.get('tflops'), '.2f')} TFLOP/s")
        n = r.get("ncu") or {}
        if n.get("ok"):
            lines.append(f"  Nsight Compute: {_num(n.get('gpu_time_us_per_call'), '.2f')} us of kernel time per call "
                         f"(profile median {_num(n.get('profile_vs_ncu_pct'), '+.1f')}% from it)")
            for name, k in sorted((n.get("kernels") or {}).items(), key=lambda kv: -kv[1].get("gpu_time_us", 0)):
                per_call = (k.get("launches") or 0) / (n.get("calls") or 1)
                lines.append(f"    {name}: {_num(k.get('gpu_time_us'), '.2f')} us x {per_call:g} a call, DRAM "
                             f"{_num(k.get('dram__throughput.avg.pct_of_peak_sustained_elapsed'), '.0f')}% "
                             f"SM {_num(k.get('sm__throughput.avg.pct_of_peak_sustained_elapsed'), '.0f')}% of peak, "
                             f"{_num(k.get('launch__registers_per_thread'), '.0f')} regs")
        elif n.get("error"):
            lines.append(f"  Nsight Compute: {str(n['error'])[:200]}")
        tele = (r.get("telemetry") or {}).get("after") or {}
        if tele.get("sm_clock_mhz"):
            lines.append(f"  GPU after: SM {tele['sm_clock_mhz']} MHz, {tele.get('temperature_c')} C, "
                         f"{_num(tele.get('power_w'), '.0f')} W, throttle: "
                         f"{', '.join(tele.get('throttle_reasons') or []) or 'none'}")
    elif r.get("timing_note"):
        lines.append(f"  {r['timing_note']}")
    if r.get("output_tail"):
        lines.append(f"  candidate output (tail): {r['output_tail'][-300:]!r}")
    if r.get("attempt_id") is not None:
        lines.append(f"  logged as attempt {r['attempt_id']}")
    return "\n".join(lines)


def baseline_text(r: dict[str, Any]) -> str:
    dev = r.get("device") or {}
    lines = [f"baselines {r.get('problem')}/{r.get('shape')} on {dev.get('name', '?')}"
             + (" (from the log)" if r.get("cached") else "")]
    if r.get("error"):
        lines.append(f"  error: {r['error']}")
    if r.get("timing_note"):
        lines.append(f"  {r['timing_note']}")
    for b in r.get("baselines") or []:
        if not b.get("available"):
            lines.append(f"  {b.get('name')}: unavailable ({b.get('reason')})")
            continue
        for mode, t in (b.get("timing") or {}).items():
            if "error" in t:
                lines.append(f"  {b.get('name')} [{mode}]: failed: {str(t['error'])[:200]}")
            else:
                lines.append(f"  {b.get('name')} [{mode}]: {_num(t.get('median_us'), '.2f')} us "
                             f"(IQR {_num(t.get('spread_pct'), '.1f')}%, {t.get('reps')} reps), "
                             f"{_num(t.get('gbps'), '.0f')} GB/s, {_num(t.get('tflops'), '.2f')} TFLOP/s")
    return "\n".join(lines)


def attempt_line(a: dict[str, Any]) -> str:
    bits = [f"#{a.get('id')}", f"{a.get('problem')}/{a.get('shape')}", a.get("tool") or "?", a.get("outcome") or "?"]
    if a.get("median_us") is not None:
        bits.append(f"{_num(a['median_us'], '.2f')} us")
    if a.get("speedup") is not None:
        bits.append(f"{_num(a['speedup'], '.2f')}x")
    if a.get("max_rel_err") is not None:
        bits.append(f"err {_num(a['max_rel_err'], '.1e')}")
    if a.get("error_class"):
        err = str(a.get("error") or "")
        bits.append(f"[{a['error_class']}] {err[:120]}")
    return " ".join(bits)


def note_line(n: dict[str, Any]) -> str:
    scope = f"{n.get('problem') or '*'}/{n.get('shape') or '*'}"
    tags = f" [{', '.join(n['tags'])}]" if n.get("tags") else ""
    return f"note #{n.get('id')} ({scope}){tags}: {n.get('text')}"


def attempts_text(page: dict[str, Any]) -> str:
    rows = page["attempts"]
    lines = [f"{len(rows)} attempt(s), newest first (offset {page['offset']})"]
    lines += ["  " + attempt_line(a) for a in rows]
    if page.get("next_offset") is not None:
        lines.append(f"  more: attempts(offset={page['next_offset']})")
    if page.get("notes"):
        lines.append("notes:")
        lines += ["  " + note_line(n) for n in page["notes"]]
    return "\n".join(lines)


def best_text(r: dict[str, Any]) -> str:
    if not r.get("found"):
        lines = [f"no correct attempt for {r['problem']}/{r['shape']} yet"]
    else:
        b = r["best"]
        lines = [f"best for {r['problem']}/{r['shape']}: {attempt_line(b)}", "source:",
                 b.get("source") or "(not stored)"]
    if r.get("notes"):
        lines.append("notes:")
        lines += ["  " + note_line(n) for n in r["notes"]]
    return "\n".join(lines)


def attempt_text(a: dict[str, Any]) -> str:
    result = a.get("result")
    return "\n".join([attempt_line(a), "source:", a.get("source") or "(not stored)", "result:",
                      json.dumps(result, indent=1, default=str) if result is not None else "(no result logged)"])


def problems_text(problems: list[dict[str, Any]]) -> str:
    lines = []
    for d in problems:
        lines.append(f"{d['name']}: {d['summary']}")
        for shape, dims in d["shapes"].items():
            lines.append(f"    {shape:<10} " + ", ".join(f"{k}={v}" for k, v in dims.items()))
        tol = d.get("tolerance") or {}
        lines.append(f"    tolerance rel_err={tol.get('rel_err')} atol={tol.get('atol')} rtol={tol.get('rtol')}; "
                     f"baselines: {', '.join(b['name'] for b in d.get('baselines', [])) or '-'}")
    lines.append("resources: problem://{name}/description, /reference, /starter, /shapes; best://{name}/{shape}")
    return "\n".join(lines)


def hotspots_text(result: dict[str, Any]) -> str:
    """Per kernel: its stall mix, then its lines by share of the samples, each with its top reasons."""
    if not result.get("ok"):
        details = "".join(f"\n  line {e.get('line')}: {e.get('message')}" for e in result.get("errors", []))
        return f"hotspots failed: {result.get('error')}{details}"
    out = []
    for k in result["kernels"]:
        if "error" in k:
            out.append(f"{k['kernel']}: {k['error']}")
            continue
        stalls = ", ".join(f"{r} {p}%" for r, p in k["stalls_pct"].items())
        out.append(f"{k['kernel']}: {k['samples']} stall samples ({stalls})")
        for row in k["lines"]:
            where = f"line {row['line']}" if row["line"] else f"{row['library']} ({row.get('function') or '?'})"
            top = ", ".join(f"{r} {p}%" for r, p in row["stalls_pct"].items())
            out.append(f"  {row['share_pct']:5.1f}%  {where:<42} {row['text'][:70]}")
            out.append(f"  {'':6}  {top}")
    return "\n".join(out)
