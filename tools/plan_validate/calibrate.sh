#!/usr/bin/env bash
# calibrate.sh: the GEMM rate-by-rows table of the planner's CPU validation
# (docs/planner_cpu_validation.md "Rate by row count"): a one-thread kernel
# calibration (`ragkv plan --calibrate-cpu`: one layer's projections of the
# shape, cold weights, at 1 ... 2048 rows) on the FITTED shapes only, the
# geometric mean of their tables per row count, rows >= 32 (the 1- and
# 8-row GEMVs are memory-bound; the roofline's memory side counts them).
# Writes OUT/gemm_rows.txt ("rows:gflops,..." for --gemm-gflops-by-rows,
# then the per-shape tables). Run it while nothing else uses the CPUs.
#   tools/plan_validate/calibrate.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-docs/data/plan_cpu}
RAGKV=${RAGKV:-build/cli/ragkv}
declare -A SPEC=(
  [F1]="layers=8,dim=512,heads=8,kv_heads=8,ffn=1408"
  [F2]="layers=4,dim=1024,heads=16,kv_heads=4,ffn=2816"
)
tables=()
for s in F1 F2; do
  line=$("$RAGKV" --kernel-threads 1 plan --model "synthetic:${SPEC[$s]},vocab=32000,ctx=4096" \
    --calibrate-cpu --chunks 1 --chunk-tokens 480 --query-tokens 32 | grep -o 'by rows {[^}]*}')
  echo "# $s: $line ($(date -u +%H:%M:%S))" >&2
  tables+=("$s ${line#by rows }")
done
/usr/bin/python3 - "${tables[@]}" >"$OUT/gemm_rows.txt" <<'PY'
import math, sys
per = {}
for arg in sys.argv[1:]:
    name, body = arg.split(" ", 1)
    for item in body.strip("{}").split(","):
        r, g = item.strip().split(":")
        per.setdefault(int(r), []).append(float(g))
rows = sorted(r for r in per if r >= 32)
print(",".join(f"{r}:{math.exp(sum(map(math.log, per[r])) / len(per[r])):.1f}" for r in rows))
for arg in sys.argv[1:]:
    print("#", arg)
PY
cat "$OUT/gemm_rows.txt"
