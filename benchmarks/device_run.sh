#!/usr/bin/env bash
# Run GPU checks on a device machine, from the project root, after the wheel preamble.
# Usage: benchmarks/device_run.sh STEP... (info gputests starters baselines overhead mla_sweep kda_sweep one_launch mla_probe
#        kda_parts kda_check tuner)
# Results go under $RES (default /tmp/res); the caller tars them into $OUT.
set -uo pipefail
RES=${RES:-/tmp/res}
mkdir -p "$RES"
export MARATHON_HOME=${MARATHON_HOME:-/tmp/marathon-home}
M="python3 -m cli"
for step in "$@"; do
  echo "=== $step $(date -u +%H:%M:%S)"
  case $step in
    info)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
      python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
      command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null ;;
    gputests)
      python3 -m pytest -q -m gpu tests/ -x 2>&1 | tail -25 ;;
    starters)
      for ps in softmax:bench mla_decode:bench mla_decode:bench_b64 ${KDA_SHAPES:-}; do
        p=${ps%%:*}; s=${ps##*:}
        $M profile kernels/$p/starter.py --problem $p --shape $s --json > "$RES/profile_${p}_${s}.json"
        python3 -c "import json,sys; r=json.load(open('$RES/profile_${p}_${s}.json')); t=r.get('timing') or {}; b=r.get('baseline') or {}; print('$p/$s', r.get('correct'), r.get('error_class'), (r.get('error') or '')[:300], 'max_rel_err', r.get('max_rel_err'), 'median_us', t.get('median_us'), 'iqr%', t.get('spread_pct'), t.get('mode'), 'baseline', b.get('name'), b.get('median_us'), 'speedup', r.get('speedup'))"
      done ;;
    baselines)
      for ps in softmax:bench mla_decode:bench mla_decode:bench_b64 ${KDA_SHAPES:-}; do
        p=${ps%%:*}; s=${ps##*:}
        $M baseline --problem $p --shape $s --refresh > "$RES/baseline_${p}_${s}.txt" 2>&1
        cat "$RES/baseline_${p}_${s}.txt" | grep -v '^  \.\.\.'
      done ;;
    overhead)
      python3 benchmarks/bench_profile.py --problem softmax --shape bench --repeats 5 --graph off --ncu \
        --json-out "$RES/overhead_softmax.json"
      python3 benchmarks/bench_profile.py --problem softmax --shape bench --repeats 3 --graph on \
        --json-out "$RES/overhead_softmax_graph.json"
      MARATHON_L2_FLUSH=write python3 benchmarks/bench_profile.py --problem softmax --shape bench --repeats 3 \
        --graph off --json-out "$RES/overhead_softmax_writeflush.json" ;;
    mla_sweep)
      python3 -m pytest -q -m gpu tests/kernels/test_solution_mla_decode.py 2>&1 | tail -3
      for s in ${MLA_SHAPES:-bench bench_b64}; do
        g=on; [ $s = bench_b64 ] && g=off
        # MLA_GRID replaces the first grid; MLA_GRID2 (empty: skipped) is crossed with its 3 fastest.
        python3 benchmarks/sweep.py kernels/mla_decode/solution.py --problem mla_decode --shape $s --graph $g \
          ${MLA_GRID:---grid BLOCK_H=16,32,64 --grid BLOCK_N=32,64 --grid NUM_WARPS=4,8 --grid NUM_STAGES=1,2} \
          --json-out "$RES/sweep_mla_${s}.json" 2>&1 | grep -v '^  \.\.\.'
        [ -n "${MLA_GRID2-x}" ] && python3 benchmarks/sweep.py kernels/mla_decode/solution.py --problem mla_decode \
          --shape $s --graph $g --top-from "$RES/sweep_mla_${s}.json" --top 3 \
          ${MLA_GRID2:---grid SPLIT_WAVES=0.5,1.0,2.0 --grid PARTIAL_BF16=0,1} \
          --json-out "$RES/sweep2_mla_${s}.json" 2>&1 | grep -v '^  \.\.\.' | tail -12
      done ;;
    kda_sweep)
      # The KDA solution against FLA in one process per shape list (FLA autotunes once a shape, then
      # from the Triton cache under $MARATHON_HOME): both prep kernels, the inverse's precision.
      python3 -m pytest -q -m gpu tests/kernels/test_solution_kda.py 2>&1 | tail -3
      python3 benchmarks/sweep.py kernels/kda/solution.py --problem kda \
        --shape ${KDA_SWEEP_SHAPE:-bench} \
        ${KDA_GRID:---grid AKK_BF16=0,1 --grid INV_PRECISION="'input'","'tf32'" --grid NUM_WARPS_PREP=8,16} \
        ${KDA_BASELINE:+--baseline $KDA_BASELINE} --json-out "$RES/sweep_kda_${KDA_SWEEP_SHAPE:-bench}.json" 2>&1 \
        | grep -v '^  \.\.\.' | tail -12 ;;
    one_launch)
      # MLA at B = 1: the one-launch candidate (kernels/mla_decode/one_launch.py, issue 17) against the two-kernel
      # solution, cold and warm, after the GPU tests of both (they run the candidate's variants): the solution as it
      # is, then the candidate over its merge knobs (ONE_LAUNCH_GRID replaces that grid).
      python3 -m pytest -q -m gpu tests/kernels/test_solution_mla_decode.py tests/kernels/test_mla_one_launch.py \
        2>&1 | tail -3
      for l2 in cold warm; do
        python3 benchmarks/sweep.py kernels/mla_decode/solution.py --problem mla_decode --shape bench --graph on \
          --l2 $l2 --json-out "$RES/sweep_two_launch_$l2.json" 2>&1 | grep -v '^  \.\.\.' | tail -4
        python3 benchmarks/sweep.py kernels/mla_decode/one_launch.py --problem mla_decode --shape bench --graph on \
          --l2 $l2 ${ONE_LAUNCH_GRID:---grid MERGE_H=4,8 --grid MERGE_D=32,64} \
          --json-out "$RES/sweep_one_launch_$l2.json" 2>&1 | grep -v '^  \.\.\.' | tail -12
      done ;;
    mla_probe)
      # The MLA split kernel's phases one at a time, warm and as the profile tool times them (BENCHMARKS.md).
      python3 benchmarks/mla_probe.py --shape ${MLA_PROBE_SHAPE:-bench} 2>&1 | tail -14 ;;
    kda_parts)
      # Per-kernel device time of the KDA solution; KDA_SETS: e.g. "--set NUM_STAGES=2"; FLA only with KDA_FLA=1.
      fla=--no-fla; [ "${KDA_FLA:-0}" = 1 ] && fla=
      python3 benchmarks/kda_parts.py --shape ${KDA_PARTS_SHAPE:-bench} ${KDA_SETS:-} $fla 2>&1 | tail -12 ;;
    kda_check)
      # The KDA solution at the small check shapes in bf16, every seed (KDA_SETS as above).
      python3 benchmarks/kda_check_small.py ${KDA_SETS:-} > "$RES/kda_check.txt" 2>&1; rc=$?
      grep -v " ok$" "$RES/kda_check.txt"; echo "kda_check: exit $rc" ;;
    tuner)
      # A model-free run over the starter's TUNE_SPACE, ending with its report (issue: bundled client).
      $M run --problem "${TUNER_PROBLEM:-mla_decode}" --shape "${TUNER_SHAPE:-bench}" --policy tuner \
        --max-steps "${TUNER_STEPS:-14}" --report "$RES/tuner_${TUNER_PROBLEM:-mla_decode}" 2>&1 | tail -30 ;;
    *) echo "unknown step $step" ;;
  esac
done
$M log --limit 200 --json > "$RES/log.json" 2>/dev/null
