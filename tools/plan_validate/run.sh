#!/usr/bin/env bash
# run.sh: the measurements of the planner's CPU validation
# (docs/planner_cpu_validation.md), one kernel thread, every shape of the
# written-down split. Writes the raw outputs to OUT (default
# docs/data/plan_cpu); fit.py reads them. Run it while nothing else uses the
# CPUs (in this repository: under the build lock).
#   tools/plan_validate/run.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-docs/data/plan_cpu}
BENCH=${BENCH:-build/cli/ragkv-bench}
RAGKV=${RAGKV:-build/cli/ragkv}
REPEATS=${REPEATS:-5}
mkdir -p "$OUT"
declare -A SPEC=(
  [F1]="layers=8,dim=512,heads=8,kv_heads=8,ffn=1408"
  [F2]="layers=4,dim=1024,heads=16,kv_heads=4,ffn=2816"
  [H1]="layers=16,dim=1024,heads=16,kv_heads=4,ffn=2816"
  [H2]="layers=12,dim=768,heads=12,kv_heads=4,ffn=2048"
  [H3]="layers=2,dim=2048,heads=16,kv_heads=8,ffn=5632"
  [H4]="layers=6,dim=1536,heads=12,kv_heads=4,ffn=4096"
  [H5]="layers=10,dim=640,heads=10,kv_heads=2,ffn=1792"
  [H6]="layers=8,dim=896,heads=14,kv_heads=2,ffn=2432"
  [H7]="layers=3,dim=1280,heads=20,kv_heads=4,ffn=3456"
  [H8]="layers=6,dim=832,heads=13,kv_heads=1,ffn=2240"
  [H9]="layers=5,dim=1152,heads=9,kv_heads=3,ffn=3072"
)
# MoE shapes: written as f32 GGUFs first (they exist only as files); the
# planner reads their headers.
declare -A MOE=(
  [M1]="moe:arch=qwen3moe,layers=4,dim=1024,heads=16,kv_heads=4,ffn=2816,experts=16,used=2,expert_ffn=1024"
  [M2]="moe:arch=llama,layers=4,dim=1024,heads=16,kv_heads=4,ffn=2816,experts=8,used=2"
  [M3]="moe:arch=qwen3moe,layers=4,dim=768,heads=12,kv_heads=4,ffn=2048,experts=32,used=4,expert_ffn=512"
  [M4]="moe:arch=qwen3moe,layers=4,dim=640,heads=10,kv_heads=2,ffn=1792,experts=64,used=8,expert_ffn=256"
)
SHAPES=${SHAPES:-"F1 F2 H1 H2 H3 M1 M2 H4 H5 H6 H7 M3 H8 H9 M4"}
# GEMM_ROWS: the GEMM rate-by-rows table every shape is planned with
# (calibrate.sh writes it from the fitted shapes; fit.py scales it).
GEMM_ROWS=${GEMM_ROWS:-$(head -1 "$OUT/gemm_rows.txt")}
# PLAN_ONLY=1: only the planner's JSON again (after a planner change; the
# measurements stay).
PLAN_ONLY=${PLAN_ONLY:-0}
for s in $SHAPES; do
  if [[ -n "${MOE[$s]:-}" ]]; then
    m="$OUT/$s.gguf"
    "$BENCH" prefill --model "${MOE[$s]}" --encoding f32 --write-gguf "$m"
  else
    m="synthetic:${SPEC[$s]},vocab=32000,ctx=4096"
  fi
  echo "== $s: $m ($(date -u +%H:%M:%S))" >&2
  # The plan first: its --calibrate-cpu probe must not see a loaded machine
  # either; only its FLOP and byte counts are used (fit.py fits the rates).
  for t in 512 2048; do
    "$RAGKV" plan --model "$m" --calibrate-cpu --chunks 1 --chunk-tokens $((t - 32)) \
      --query-tokens 32 --ratios 0.15 --decode-batch 1 --gemm-gflops-by-rows "$GEMM_ROWS" --json >"$OUT/$s.plan$t.json"
  done
  "$RAGKV" plan --model "$m" --calibrate-cpu --chunks 6 --chunk-tokens 256 --query-tokens 32 \
    --ratios 0.15 --decode-batch 1 --gemm-gflops-by-rows "$GEMM_ROWS" --json >"$OUT/$s.planblend.json"
  if [[ "$PLAN_ONLY" == 1 ]]; then
    [[ -n "${MOE[$s]:-}" ]] && rm -f "$m"
    continue
  fi
  "$BENCH" --kernel-threads 1 prefill --model "$m" --tokens 512,2048 --repeats "$REPEATS" \
    --compare llama.cpp --encoding f32 >"$OUT/$s.prefill.txt"
  "$BENCH" --kernel-threads 1 blend --model "$m" --chunks 6 --chunk-tokens 256 --query-tokens 32 \
    --ratios 0.15 --repeats "$REPEATS" --kv-dtype f32 >"$OUT/$s.blend.txt"
  [[ -n "${MOE[$s]:-}" ]] && rm -f "$m"  # reproducible from its spec
done
