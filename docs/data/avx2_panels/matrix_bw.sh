#!/bin/bash
# AVX-512 without VNNI (Skylake-SP/X class) on this Zen 4 box: ragkv with VNNI hidden (RAGKV_VNNI=0,
# OpenBLAS SkylakeX core) against llama.cpp's skylakex CPU variant (AVX-512 F/BW/DQ/VL, no VNNI).
cd /work/main
N=layers=8,dim=512,heads=8,kv_heads=4,ffn=1408,vocab=32000
W=layers=4,dim=2048,heads=16,kv_heads=8,ffn=5632,vocab=32000
run() { # shape-label panels shape enc tokens
  echo "== $1 panels=$2 $3 $4"
  RAGKV_VNNI=0 RAGKV_VNNI_PANELS=$2 OPENBLAS_CORETYPE=SkylakeX timeout 900 build/cli/ragkv bench prefill --compare llama.cpp \
    --llamacpp-cpu skylakex --encoding $4 --tokens $5 --repeats 3 --threads 2 --synthetic $3 2>&1 | tail -7
}
for s in N W; do for e in q8_0 q4_k_m; do for p in 0 1; do run $s $p ${!s} $e 512,2048; done; done; done
for s in N W; do run $s 1 ${!s} f16 512,2048; done
