#!/usr/bin/python3
"""train.py: trains the demo checkpoint (docs/demo_model.md), the small
Llama that `scripts/demo` serves by default, on the project's own docs, and
writes it as an architecture-llama GGUF (F16 matrices, F32 norms) with a
SentencePiece-style vocabulary both ragkv and llama.cpp load.

    flock /tmp/ragkv-build.lock nice -n 5 /usr/bin/python3 \
        tools/demo_model/train.py [--rev COMMIT] --out models/demo.gguf

(--rev: the docs of that commit, as docs/demo_model.md records for the
committed file; default the work tree.) ~11 minutes on 2 cores; prints the
loss every 10 steps and a greedy sample at the end.

Needs Debian's python3-torch (1.13, CPU; a dev-only dependency, as for
tools/xchunk). The transformer is tools/xchunk/archs.py's llama network
(adjacent-pair RoPE, GQA, SwiGLU, untied classifier) with another shape; the GGUF writer
is tools/xchunk/gguf.py. Seeded: the same arguments give the same file on
the same machine (2 threads). The bar is words, not fluent or grounded
answers: the model learns docs-like prose and, after the chat layout's
assistant header, to copy a sentence or two of a document.
"""

import argparse
import hashlib
import math
import os
import random
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(ROOT, "tools", "xchunk"))
import corpus  # noqa: E402
import archs  # noqa: E402  (tools/xchunk/archs.py: the network)
import gguf  # noqa: E402  (tools/xchunk/gguf.py)

BOS, EOS = 1, 2
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
QUESTIONS = ["What does the text say about {}?", "What is {}?", "How does {} work?",
             "Explain {}.", "Summarize {}.", "Tell me about {}."]


class Config:
    dim = 128
    layers = 4
    heads = 4
    kv_heads = 2
    head_dim = 32
    hidden = 384
    vocab = 1536
    context = 1024
    eps = 1e-5
    theta = 10000.0


class Writer(gguf.Writer):
    def tensor_f16(self, name, array):
        """As gguf.Writer.tensor, stored as ggml F16 (type 1)."""
        gguf._s(self.info, name)
        self.info += struct.pack("<I", array.ndim)
        for d in reversed(array.shape):
            self.info += struct.pack("<Q", d)
        while len(self.data) % 32:
            self.data += b"\0"
        self.info += struct.pack("<IQ", 1, len(self.data))
        self.data += array.astype("<f2").tobytes()
        self.n_tensors += 1


def sentences(text, n):
    out, start = [], 0
    for i, ch in enumerate(text):
        if ch in ".!?" and (i + 1 == len(text) or text[i + 1] == " "):
            out.append(text[start:i + 1].strip())
            start = i + 1
            if len(out) == n:
                break
    return " ".join(out) if out else text


def document(rng, tok, secs, max_tokens):
    """(title, text): consecutive paragraphs of one section, at most
    max_tokens (a longer first paragraph is cut at a space)."""
    title, paras = secs[rng.randrange(len(secs))]
    i = rng.randrange(len(paras))
    text = paras[i]
    while len(tok.encode(text)) > max_tokens:
        text = text[:text.rfind(" ", 0, int(len(text) * 0.8))]
    for p in paras[i + 1:]:
        if len(tok.encode(text + "\n\n" + p)) > max_tokens:
            break
        text += "\n\n" + p
    return title, text


def chat_sample(rng, tok, secs):
    """Token ids of one chat: documents (server/prompt.h's layout) and a
    question in the user turn (chatml), then an answer that copies the start
    of one document, then EOS."""
    docs = [document(rng, tok, secs, rng.choice([64, 128, 256])) for _ in range(rng.randint(1, 4))]
    pick = rng.randrange(len(docs))
    question = rng.choice(QUESTIONS).format(docs[pick][0])
    user = "\n\n".join(t + "\n" + x for t, x in docs) + "\n\n" + question
    answer = sentences(docs[pick][1].split("\n\n")[0], rng.randint(1, 2))
    text = "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n" + answer
    return [BOS] + tok.encode(text) + [EOS]


def batch(rng, tok, secs, rows, length):
    """rows x (length + 1) ids: each row starts a chat at position 0 and is
    filled with further chats."""
    out = []
    for _ in range(rows):
        r = []
        while len(r) < length + 1:
            r += chat_sample(rng, tok, secs)
        out.append(r[:length + 1])
    return torch.tensor(out)


def export(model, vocab, path, meta):
    c = model.c
    pieces, scores, types = vocab
    w = Writer()
    w.string("general.architecture", "llama")
    w.string("general.name", "ragkv-demo")
    w.string("general.description", meta)
    w.u32("general.file_type", 1)  # mostly F16
    w.u32("llama.context_length", c.context)
    w.u32("llama.embedding_length", c.dim)
    w.u32("llama.feed_forward_length", c.hidden)
    w.u32("llama.block_count", c.layers)
    w.u32("llama.attention.head_count", c.heads)
    w.u32("llama.attention.head_count_kv", c.kv_heads)
    w.u32("llama.attention.key_length", c.head_dim)
    w.u32("llama.attention.value_length", c.head_dim)
    w.u32("llama.rope.dimension_count", c.head_dim)
    w.u32("llama.vocab_size", len(pieces))
    w.f32("llama.attention.layer_norm_rms_epsilon", c.eps)
    w.f32("llama.rope.freq_base", c.theta)
    w.string("tokenizer.ggml.model", "llama")
    w.strings("tokenizer.ggml.tokens", pieces)
    w.f32s("tokenizer.ggml.scores", scores)
    w.i32s("tokenizer.ggml.token_type", types)
    w.u32("tokenizer.ggml.bos_token_id", BOS)
    w.u32("tokenizer.ggml.eos_token_id", EOS)
    w.u32("tokenizer.ggml.unknown_token_id", 0)
    w.string("tokenizer.chat_template", CHATML_TEMPLATE)
    t = lambda p: p.detach().numpy().astype(np.float32)  # noqa: E731
    w.tensor_f16("token_embd.weight", t(model.embed.weight))
    w.tensor("output_norm.weight", t(model.final_norm))
    w.tensor_f16("output.weight", t(model.out.weight))
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        w.tensor(p + "attn_norm.weight", t(b.attn_norm))
        w.tensor_f16(p + "attn_q.weight", t(b.wq.weight))
        w.tensor_f16(p + "attn_k.weight", t(b.wk.weight))
        w.tensor_f16(p + "attn_v.weight", t(b.wv.weight))
        w.tensor_f16(p + "attn_output.weight", t(b.wo.weight))
        w.tensor(p + "ffn_norm.weight", t(b.ffn_norm))
        w.tensor_f16(p + "ffn_gate.weight", t(b.gate.weight))
        w.tensor_f16(p + "ffn_up.weight", t(b.up.weight))
        w.tensor_f16(p + "ffn_down.weight", t(b.down.weight))
    w.write(path)


@torch.no_grad()
def sample_answer(model, tok, secs, seed, n=40):
    rng = random.Random(seed)
    title, text = document(rng, tok, secs, 128)
    prompt = ("<|im_start|>user\n" + title + "\n" + text + "\n\nWhat is " + title +
              "?<|im_end|>\n<|im_start|>assistant\n")
    ids = [BOS] + tok.encode(prompt)
    out = []
    for _ in range(n):
        nxt = int(model(torch.tensor([ids + out]))[0, -1].argmax())
        if nxt == EOS:
            break
        out.append(nxt)
    return tok.decode(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--long-steps", type=int, default=100,
                    help="the last N steps train on rows of the full context (half as many rows)")
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=Config.vocab)
    ap.add_argument("--rev", default=None,
                    help="read the docs at this git commit (default: the work tree)")
    ap.add_argument("--time-limit", type=float, default=0, help="stop early after this many s")
    ap.add_argument("--shape", default="",
                    help="another shape, e.g. layers=16,dim=64,head_dim=16,hidden=192 "
                         "(Config's fields; docs/demo_model.md \"A deep variant\")")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = random.Random(a.seed)
    text = corpus.corpus_text(ROOT, a.rev)
    secs = corpus.sections(ROOT, a.rev)
    digest = hashlib.sha256(text.encode()).hexdigest()
    vocab = corpus.learn(text, a.vocab, {s: 500 for s in corpus.CHATML})
    tok = corpus.Tokenizer(*vocab)
    print("corpus: %d sections, %d chars, %d tokens (sha256 %s); vocab %d" % (
        len(secs), len(text), len(tok.encode(text)), digest[:16], len(vocab[0])), flush=True)
    shape_fields = ("dim", "layers", "heads", "kv_heads", "head_dim", "hidden", "eps", "theta")
    c = archs.Config("llama")  # the network's switches; Config's shape over them
    for k in shape_fields + ("context",):
        setattr(c, k, getattr(Config, k))
    for kv in filter(None, a.shape.split(",")):
        k, _, v = kv.partition("=")
        if k not in shape_fields or not v:
            sys.exit("train.py: --shape: %r is not FIELD=VALUE with FIELD one of %s"
                     % (kv, ", ".join(shape_fields)))
        setattr(c, k, type(getattr(Config, k))(v))
    if c.heads % c.kv_heads:
        sys.exit("train.py: --shape: heads %d is not a multiple of kv_heads %d" % (c.heads, c.kv_heads))
    c.vocab = len(vocab[0])
    model = archs.Model(c)
    n_params = sum(p.numel() for p in model.parameters())
    print("model: %d params" % n_params, flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01, betas=(0.9, 0.95))
    warm = max(1, a.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, s / a.steps)))))
    t0, run = time.time(), 0.0
    last = 0.0
    for step in range(1, a.steps + 1):
        long = step > a.steps - a.long_steps
        rows, seq = (max(1, a.batch * a.seq // c.context), c.context) if long else (a.batch, a.seq)
        ids = batch(rng, tok, secs, rows, seq)
        mask = torch.ones(seq, seq, dtype=torch.bool).tril()[None, None]
        logits = model(ids[:, :-1], torch.arange(seq)[None].expand(rows, seq), mask)
        loss = F.cross_entropy(logits.reshape(-1, c.vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        run += loss.item()
        if step % 10 == 0:
            last = run / 10
            print("step %d/%d loss=%.4f %.0f s" % (step, a.steps, last, time.time() - t0), flush=True)
            run = 0.0
        if a.time_limit and time.time() - t0 > a.time_limit:
            print("time limit reached at step %d" % step, flush=True)
            break
    model.eval()
    print("sample answer:", repr(sample_answer(model, tok, secs, 10_000 + a.seed)), flush=True)
    meta = ("ragkv demo checkpoint: tools/demo_model/train.py --seed %d --steps %d%s; corpus sha256 %s; "
            "final loss %.4f" % (a.seed, a.steps, " --shape " + a.shape if a.shape else "", digest, last))
    export(model, vocab, a.out, meta)
    print("wrote", a.out, os.path.getsize(a.out), "bytes, training %.0f s" % (time.time() - t0))


if __name__ == "__main__":
    main()
