#!/bin/bash
# AVX2-only figures on this AVX-512 box: ragkv capped to AVX2 (RAGKV_ISA=avx2, OpenBLAS Haswell core)
# against llama.cpp's haswell CPU variant (the only libggml-cpu in /tmp/llhsw).
cd /work/main
N=layers=8,dim=512,heads=8,kv_heads=4,ffn=1408,vocab=32000
W=layers=4,dim=2048,heads=16,kv_heads=8,ffn=5632,vocab=32000
run() { # label panels shape enc tokens
  echo "== $1 panels=$2 $3 $4"
  RAGKV_VNNI_PANELS=$2 RAGKV_ISA=avx2 OPENBLAS_CORETYPE=Haswell timeout 900 build/cli/ragkv bench prefill --compare llama.cpp \
    --llamacpp-dir /tmp/llhsw --encoding $4 --tokens $5 --repeats 3 --threads 2 --synthetic $3 2>&1 | tail -8
}
for s in N W; do for e in f16 q8_0 q4_k_m; do run $s 1 ${!s} $e 512,2048; done; done
for s in N W; do for e in q8_0 q4_k_m; do run $s 0 ${!s} $e 512,2048; done; done
for e in q4_0 q4_1 q5_0 q5_1 q5_k_m; do run W 0 $W $e 512; run W 1 $W $e 512; done
