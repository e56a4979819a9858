#!/bin/bash
cd /work/main
N=layers=8,dim=512,heads=8,kv_heads=4,ffn=1408,vocab=32000
W=layers=4,dim=2048,heads=16,kv_heads=8,ffn=5632,vocab=32000
build/cli/ragkv bench prefill --model synthetic:$N --encoding q8_0 --write-gguf /tmp/s35/n_q8.gguf >/dev/null 2>&1 || echo "write failed"
ls -la /tmp/s35/n_q8.gguf
for round in 1 2 3; do for p in 0 1; do
  echo "== round $round panels=$p"
  RAGKV_VNNI_PANELS=$p RAGKV_ISA=avx2 OPENBLAS_CORETYPE=Haswell build/cli/ragkv bench prefill --model /tmp/s35/n_q8.gguf --tokens 512,2048 --repeats 3 --threads 2 2>&1 | grep -E "^ +(512|2048) "
done; done
