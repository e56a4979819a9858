#!/usr/bin/python3
"""train.py: trains the xchunk instrument (docs/xchunk.md) and writes it as
a GGUF of the chosen architecture (tools/xchunk/archs.py; default llama).

    /usr/bin/python3 tools/xchunk/train.py --out models/xchunk.gguf
    /usr/bin/python3 tools/xchunk/train.py --arch gemma3 --out models/xchunk_gemma3.gguf

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

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import archs  # noqa: E402
import xchunk_task as task  # noqa: E402


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
    ap.add_argument("--arch", default="llama", choices=["llama", "phi3", "qwen3moe", "gemma3"],
                    help="the GGUF architecture (tools/xchunk/archs.py)")
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
    model = archs.Model(archs.Config(a.arch))
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
    archs.export(model, a.out)
    print("wrote", a.out, os.path.getsize(a.out), "bytes")


if __name__ == "__main__":
    main()
