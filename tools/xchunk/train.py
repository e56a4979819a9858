#!/usr/bin/python3
"""train.py: trains the xchunk instrument (docs/xchunk.md) and writes it as
an architecture-llama GGUF.

    /usr/bin/python3 tools/xchunk/train.py --out models/xchunk.gguf

Needs Debian's python3-torch (1.13, CPU; a dev-only dependency). Seeded: the
same arguments give the same file on the same machine. Prints progress and,
at the end, accuracy of full prefill and of full KV reuse (chunks attending
only to themselves) on passage-split prompts, as a sanity check of the gap
that `ragkv bench quality --task xchunk` measures properly.
"""

import argparse
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402
import xchunk_task as task  # noqa: E402


class Config:
    dim = 128
    layers = 4
    heads = 4
    kv_heads = 2
    head_dim = 32
    hidden = 256
    vocab = task.VOCAB
    context = 256
    eps = 1e-5
    theta = 10000.0


def rope(x, pos, theta):
    """Adjacent-pair RoPE (llama.cpp's LLAMA_ROPE_TYPE_NORM). x: [B,H,T,D]."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = pos[:, None, :, None].float() * inv  # [B,1,T,D/2]
    c, s = torch.cos(ang), torch.sin(ang)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return out.flatten(-2)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.attn_norm = torch.nn.Parameter(torch.ones(c.dim))
        self.ffn_norm = torch.nn.Parameter(torch.ones(c.dim))
        self.wq = torch.nn.Linear(c.dim, c.heads * c.head_dim, bias=False)
        self.wk = torch.nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.wv = torch.nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.wo = torch.nn.Linear(c.heads * c.head_dim, c.dim, bias=False)
        self.gate = torch.nn.Linear(c.dim, c.hidden, bias=False)
        self.up = torch.nn.Linear(c.dim, c.hidden, bias=False)
        self.down = torch.nn.Linear(c.hidden, c.dim, bias=False)

    def norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.eps) * w

    def forward(self, x, pos, mask):
        c = self.c
        B, T, _ = x.shape
        h = self.norm(x, self.attn_norm)
        q = self.wq(h).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = self.wk(h).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.wv(h).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope(q, pos, c.theta), rope(k, pos, c.theta)
        rep = c.heads // c.kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.wo(o)
        h = self.norm(x, self.ffn_norm)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = torch.nn.Embedding(c.vocab, c.dim)
        self.blocks = torch.nn.ModuleList(Block(c) for _ in range(c.layers))
        self.final_norm = torch.nn.Parameter(torch.ones(c.dim))
        self.out = torch.nn.Linear(c.dim, c.vocab, bias=False)
        torch.nn.init.normal_(self.embed.weight, std=1.0)

    def forward(self, ids, pos=None, mask=None):
        B, T = ids.shape
        if pos is None:
            pos = torch.arange(T)[None].expand(B, T)
        if mask is None:
            mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x, pos, mask)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.eps) * self.final_norm
        return self.out(x)


def loss_of(model, ids, targets):
    x = torch.tensor(ids)
    logits = model(x)
    rows, cols, ans = [], [], []
    for b, tg in enumerate(targets):
        for p, a in tg:
            rows.append(b), cols.append(p), ans.append(a)
    sel = logits[rows, cols]
    loss = F.cross_entropy(sel, torch.tensor(ans))
    acc = (sel.argmax(-1) == torch.tensor(ans)).float().mean().item()
    return loss, acc


def split_prompt(rng, pairs, chunks):
    """One evaluation prompt as the C++ bench builds it: (ids, chunk spans,
    position of the queried key, answer)."""
    keys = rng.sample(range(task.N_KEYS), pairs)
    values = [rng.randrange(task.N_VALUES) for _ in range(pairs)]
    ctx = []
    for k, v in zip(keys, values):
        ctx += [task.KEY0 + k, task.VALUE0 + v]
    # Boundaries just before a value token, spread evenly.
    cuts = [2 * round(pairs * j / chunks) + 1 for j in range(1, chunks)]
    spans, start = [], 1
    for cut in cuts + [len(ctx)]:
        spans.append((start, 1 + cut))
        start = 1 + cut
    i = (rng.choice(cuts) - 1) // 2  # the pair whose value opens a passage
    ids = [task.BOS] + ctx + [task.QUERY, task.KEY0 + keys[i]]
    return ids, spans, len(ids) - 1, task.VALUE0 + values[i]


@torch.no_grad()
def evaluate(model, seed, n, pairs, chunks):
    rng = random.Random(seed)
    full = reuse = 0
    for _ in range(n):
        ids, spans, qpos, ans = split_prompt(rng, pairs, chunks)
        T = len(ids)
        x = torch.tensor([ids])
        full += int(model(x)[0, qpos].argmax().item() == ans)
        # Full reuse: each passage attends only to itself (no BOS either),
        # at its final positions; the query sees everything.
        m = torch.ones(T, T, dtype=torch.bool).tril()
        for a, b in spans:
            m[a:b, :a] = False
        reuse += int(model(x, mask=m[None, None])[0, qpos].argmax().item() == ans)
    return full / n, reuse / n


def export(model, path):
    c = model.c
    w = gguf.Writer()
    w.string("general.architecture", "llama")
    w.string("general.name", "ragkv-xchunk")
    w.u32("llama.context_length", c.context)
    w.u32("llama.embedding_length", c.dim)
    w.u32("llama.feed_forward_length", c.hidden)
    w.u32("llama.block_count", c.layers)
    w.u32("llama.attention.head_count", c.heads)
    w.u32("llama.attention.head_count_kv", c.kv_heads)
    w.u32("llama.attention.key_length", c.head_dim)
    w.u32("llama.attention.value_length", c.head_dim)
    w.u32("llama.rope.dimension_count", c.head_dim)
    w.f32("llama.attention.layer_norm_rms_epsilon", c.eps)
    w.f32("llama.rope.freq_base", c.theta)
    tokens, types = task.vocab()
    w.string("tokenizer.ggml.model", "llama")
    w.strings("tokenizer.ggml.tokens", tokens)
    w.f32s("tokenizer.ggml.scores", [0.0] * len(tokens))
    w.i32s("tokenizer.ggml.token_type", types)
    w.u32("tokenizer.ggml.bos_token_id", 1)
    w.u32("tokenizer.ggml.eos_token_id", 2)
    w.u32("tokenizer.ggml.unknown_token_id", 0)
    t = lambda p: p.detach().numpy().astype(np.float32)  # noqa: E731
    w.tensor("token_embd.weight", t(model.embed.weight))
    w.tensor("output_norm.weight", t(model.final_norm))
    w.tensor("output.weight", t(model.out.weight))
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        w.tensor(p + "attn_norm.weight", t(b.attn_norm))
        w.tensor(p + "attn_q.weight", t(b.wq.weight))
        w.tensor(p + "attn_k.weight", t(b.wk.weight))
        w.tensor(p + "attn_v.weight", t(b.wv.weight))
        w.tensor(p + "attn_output.weight", t(b.wo.weight))
        w.tensor(p + "ffn_norm.weight", t(b.ffn_norm))
        w.tensor(p + "ffn_gate.weight", t(b.gate.weight))
        w.tensor(p + "ffn_up.weight", t(b.up.weight))
        w.tensor(p + "ffn_down.weight", t(b.down.weight))
    w.write(path)


def curriculum_batch(rng, a, step):
    """Copy batches only for the first --copy-steps (they grow the lookup
    heads; the query task alone stalls at "name some value of the context",
    see docs/xchunk.md), then one copy batch in four; the query task's
    longest context grows from pairs_min + 8 to pairs_max over the next
    --copy-steps."""
    if step <= a.copy_steps or step % 4 == 0:
        return task.copy_batch(rng, a.batch, 4, 20)
    grow = min(1.0, (step - a.copy_steps) / a.copy_steps)
    top = int(a.pairs_min + 8 + grow * (a.pairs_max - a.pairs_min - 8))
    return task.training_batch(rng, a.batch, a.pairs_min, top, a.queries)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1600)
    ap.add_argument("--copy-steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pairs-min", type=int, default=4)
    ap.add_argument("--pairs-max", type=int, default=40)
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = random.Random(a.seed)
    model = Model(Config())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    warm = max(1, a.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / a.steps))))
    t0, run_loss, run_acc = time.time(), 0.0, 0.0
    for step in range(1, a.steps + 1):
        ids, targets = curriculum_batch(rng, a, step)
        loss, acc = loss_of(model, ids, targets)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        run_loss += loss.item()
        run_acc += acc
        if step % 100 == 0:
            print("step %d/%d loss=%.4f acc=%.3f %.0f s" % (step, a.steps, run_loss / 100,
                                                          run_acc / 100, time.time() - t0),
                  flush=True)
            run_loss = run_acc = 0.0
    model.eval()
    full, reuse = evaluate(model, 10_000 + a.seed, 400, 32, 4)
    print("held-out split prompts (32 pairs, 4 passages): full-prefill acc=%.3f "
          "full-reuse acc=%.3f" % (full, reuse), flush=True)
    export(model, a.out)
    print("wrote", a.out, os.path.getsize(a.out), "bytes")


if __name__ == "__main__":
    main()
