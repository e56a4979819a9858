#!/usr/bin/env python3
"""Retrieve, blend and answer through a running `ragkv serve`, then print
the TTFT breakdown (retrieve, fetch, blend, query prefill) next to full
prefill's.

  python3 examples/retrieve_and_blend.py --server 127.0.0.1:50051 \
      --question "What did Lily have?" [--k 3] [--ratio 0.15] [--token-file F]
"""
import argparse
import sys

from ragkv.v1 import blend_pb2
from ragkv_client import Client, RagkvError


def breakdown(name, r):
    t = r.ttft
    return (f"{name:13s} TTFT {t.ttft_ms:8.2f} ms = retrieve {t.retrieve_ms:.2f} + fetch "
            f"{t.fetch_ms:.2f} + blend {t.blend_ms:.2f} + query prefill {t.query_prefill_ms:.2f}"
            f"  ({r.recomputed_tokens}/{r.context_tokens} context tokens recomputed)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True)
    p.add_argument("--question", required=True)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--ratio", type=float, default=0.0, help="0: the server's (quality gate)")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--token-file", default=None, help="bearer token file (mode 0600)")
    a = p.parse_args()
    c = Client(a.server, auth_token_file=a.token_file, deadline_s=120)
    try:
        hits = c.search(text=a.question, k=a.k)
        ids = [h.chunk.chunk_id for h in hits.hits]
        print(f"retrieved chunks: {ids}")
        fused = c.blend_segments(ids + [a.question], ratio=a.ratio)
        k0, _ = fused.layer_views(0)
        print(f"fused KV: {len(fused.k)} layers of {list(k0.shape)} (heads, tokens, dim), "
              f"{fused.summary.recomputed_tokens} tokens recomputed per layer, "
              f"{len(fused.summary.failed_loads)} failed loads")
        blended = c.generate(a.question, chunk_ids=ids, k=0, ratio=a.ratio,
                             max_new_tokens=a.max_new_tokens)
        full = c.generate(a.question, chunk_ids=ids, k=0, mode=blend_pb2.BLEND_MODE_FULL_PREFILL,
                          max_new_tokens=a.max_new_tokens)
    except RagkvError as e:
        print(f"error: {e} (request id {e.request_id})", file=sys.stderr)
        return 1
    finally:
        c.close()
    print(breakdown("cacheblend", blended))
    print(breakdown("full prefill", full))
    print(f"answer (cacheblend):   {blended.answer!r}")
    print(f"answer (full prefill): {full.answer!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
