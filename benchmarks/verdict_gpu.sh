#!/usr/bin/env bash
# The judged profile path on a GPU: solutions and starters profiled through the CLI, each report's verdict,
# timing, bounds, census and phase times summarised. Run from the project root after the wheel preamble.
# Usage: benchmarks/verdict_gpu.sh [OUTDIR]
set -uo pipefail
R=${1:-/tmp/res}
mkdir -p "$R"
export MARATHON_HOME=${MARATHON_HOME:-/tmp/marathon-home} FLA_FLASH_KDA=0
M="python3 -m cli"
summary() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r.get("timing") or {}; v = r.get("verification") or {}; b = (v.get("bounds") or {}).get("bracket") or {}
c = v.get("census") or {}
print(json.dumps({"file": sys.argv[1].rsplit("/", 1)[-1], "correct": r.get("correct"), "verified": r.get("verified"),
    "class": r.get("error_class"), "error": (r.get("error") or "")[:300], "median_us": t.get("median_us"),
    "iqr%": t.get("spread_pct"), "mode": t.get("mode"), "reps": t.get("reps"), "speedup": r.get("speedup"),
    "baseline_us": (r.get("baseline") or {}).get("median_us"), "floor_us": (r.get("achieved") or {}).get("floor_us"),
    "unexplained": b.get("unexplained_us_per_rep"), "allowed": b.get("allowed_us_per_rep"),
    "overhead": b.get("overhead_us_per_rep"), "census": c.get("status"), "census_reason": (c.get("reason") or "")[:200],
    "by": v.get("by"), "phases": r.get("phases"), "worker_s": r.get("worker_s")}))
PY
}
n=0
for spec in ${SPECS:-softmax:starter:bench softmax:starter:bench mla_decode:solution:bench mla_decode:solution:bench \
    mla_decode:solution:bench_b64 mla_decode:starter:bench kda:solution:bench}; do
  IFS=: read -r p f s <<<"$spec"
  n=$((n + 1))
  out="$R/profile_${n}_${p}_${f}_${s}.json"
  $M profile "kernels/$p/$f.py" --problem "$p" --shape "$s" --json > "$out" 2> "$R/profile_${n}.err"
  summary "$out" || tail -5 "$R/profile_${n}.err"
done
for h in ${HOSTILE:-}; do
  IFS=: read -r p f s <<<"$h"
  out="$R/hostile_$(basename "$f" .py)_${s}.json"
  $M profile "$f" --problem "$p" --shape "$s" --json > "$out" 2> "$out.err"
  summary "$out" || tail -5 "$out.err"
done
