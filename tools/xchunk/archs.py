"""archs.py: the xchunk instrument's network in each GGUF architecture that
ragkv blends (docs/xchunk.md "Other architectures"), and its export.

    llama     the original instrument: adjacent-pair RoPE, SwiGLU
    phi3      NEOX RoPE, fused attn_qkv ([q | k | v]) and ffn_up ([gate | up])
    qwen3moe  NEOX RoPE, per-head q/k RMSNorm, a softmax top-k router over
              experts (renormalised over the k chosen), as llama.cpp's
              build_moe_ffn computes it for qwen3moe
    gemma3    embeddings scaled by sqrt(dim), q/k norms, post-attention and
              post-FFN norms, GeGLU (tanh GELU), sliding-window layers (their
              own RoPE base) interleaved with global ones by llama.cpp's
              pattern rule: layer l is local iff l % pattern < pattern - 1

Each writes the tensors and keys that llama.cpp's loader and ragkv's read
(tests/llamacpp/random_model.h writes the same names for random weights).
"""

import math

import numpy as np
import torch
import torch.nn.functional as F

import gguf
import xchunk_task as task


class Config:
    def __init__(self, arch):
        self.arch = arch
        self.dim, self.layers, self.heads, self.kv_heads, self.head_dim = 128, 4, 4, 2, 32
        self.hidden = 256
        self.vocab = task.VOCAB
        self.context = 256
        self.eps = 1e-5
        self.theta = 10000.0
        self.neox = arch != "llama"
        self.qk_norm = arch in ("qwen3moe", "gemma3")
        self.experts, self.experts_used, self.expert_hidden = (4, 2, 128) if arch == "qwen3moe" else (0, 0, 0)
        self.gemma = arch == "gemma3"
        # gemma3: window 16 (prompts are 67-83 tokens), pattern 3 (layers 0,
        # 1 and 3 local, layer 2 global), local base 1e4, global base 1e6.
        self.window, self.pattern = (16, 3) if self.gemma else (0, 0)
        self.theta_swa = 10000.0
        if self.gemma:
            self.theta = 1000000.0

    def is_swa(self, layer):
        return self.window > 0 and layer % self.pattern < self.pattern - 1


def rope(x, pos, theta, neox):
    """RoPE on x [B,H,T,D]: adjacent pairs (LLAMA_ROPE_TYPE_NORM) or halves
    (NEOX)."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = pos[:, None, :, None].float() * inv  # [B,1,T,D/2]
    c, s = torch.cos(ang), torch.sin(ang)
    if neox:
        x0, x1 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Experts(torch.nn.Module):
    """A softmax top-k router and E SwiGLU experts, every expert computed
    densely (tiny sizes) and weighted by the sparse, renormalised gates."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        e, d, f = c.experts, c.dim, c.expert_hidden
        self.router = torch.nn.Linear(d, e, bias=False)
        self.gate = torch.nn.Parameter(torch.randn(e, f, d) / math.sqrt(d))
        self.up = torch.nn.Parameter(torch.randn(e, f, d) / math.sqrt(d))
        self.down = torch.nn.Parameter(torch.randn(e, d, f) / math.sqrt(f))

    def forward(self, h):
        c = self.c
        e, f, d = c.experts, c.expert_hidden, c.dim
        probs = self.router(h).softmax(-1)  # [B,T,E]
        top, idx = probs.topk(c.experts_used, dim=-1)
        w = torch.zeros_like(probs).scatter(-1, idx, top / top.sum(-1, keepdim=True))
        # sum_e w_e down_e(a_e) = [down_0 | ... | down_E-1] . [w_0 a_0 ; ... ; w_E-1 a_E-1]
        g = h @ self.gate.reshape(e * f, d).t()
        u = h @ self.up.reshape(e * f, d).t()
        a = (F.silu(g) * u).unflatten(-1, (e, f)) * w[..., None]
        return a.flatten(-2) @ self.down.permute(1, 0, 2).reshape(d, e * f).t()


class Block(torch.nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        self.c, self.layer = c, layer
        ones = lambda n: torch.nn.Parameter(torch.ones(n))  # noqa: E731
        self.attn_norm, self.ffn_norm = ones(c.dim), ones(c.dim)
        self.wq = torch.nn.Linear(c.dim, c.heads * c.head_dim, bias=False)
        self.wk = torch.nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.wv = torch.nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.wo = torch.nn.Linear(c.heads * c.head_dim, c.dim, bias=False)
        if c.qk_norm:
            self.q_norm, self.k_norm = ones(c.head_dim), ones(c.head_dim)
        if c.gemma:
            self.post_attn_norm, self.post_ffn_norm = ones(c.dim), ones(c.dim)
        if c.experts:
            self.moe = Experts(c)
        else:
            self.gate = torch.nn.Linear(c.dim, c.hidden, bias=False)
            self.up = torch.nn.Linear(c.dim, c.hidden, bias=False)
            self.down = torch.nn.Linear(c.hidden, c.dim, bias=False)

    def attend(self, x, pos, mask):
        c = self.c
        B, T, _ = x.shape
        h = rms(x, self.attn_norm, c.eps)
        q = self.wq(h).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = self.wk(h).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.wv(h).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        if c.qk_norm:
            q, k = rms(q, self.q_norm, c.eps), rms(k, self.k_norm, c.eps)
        theta = c.theta_swa if c.is_swa(self.layer) else c.theta
        q, k = rope(q, pos, theta, c.neox), rope(k, pos, theta, c.neox)
        rep = c.heads // c.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if c.is_swa(self.layer):  # a query at p sees keys p - window + 1 .. p
            dist = pos[:, None, :, None] - pos[:, None, None, :]
            mask = mask & (dist < c.window)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        return self.wo((att @ v).transpose(1, 2).reshape(B, T, -1))

    def ffn(self, h):
        if self.c.experts:
            return self.moe(h)
        act = F.gelu(self.gate(h), approximate="tanh") if self.c.gemma else F.silu(self.gate(h))
        return self.down(act * self.up(h))

    def forward(self, x, pos, mask):
        c = self.c
        a = self.attend(x, pos, mask)
        x = x + (rms(a, self.post_attn_norm, c.eps) if c.gemma else a)
        f = self.ffn(rms(x, self.ffn_norm, c.eps))
        return x + (rms(f, self.post_ffn_norm, c.eps) if c.gemma else f)


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = torch.nn.Embedding(c.vocab, c.dim)
        self.blocks = torch.nn.ModuleList(Block(c, i) for i in range(c.layers))
        self.final_norm = torch.nn.Parameter(torch.ones(c.dim))
        self.out = torch.nn.Linear(c.dim, c.vocab, bias=False)
        # gemma3 multiplies the embeddings by sqrt(dim): start them smaller.
        torch.nn.init.normal_(self.embed.weight, std=1.0 / math.sqrt(c.dim) if c.gemma else 1.0)

    def forward(self, ids, pos=None, mask=None):
        B, T = ids.shape
        if pos is None:
            pos = torch.arange(T)[None].expand(B, T)
        if mask is None:
            mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
        x = self.embed(ids)
        if self.c.gemma:
            x = x * math.sqrt(self.c.dim)
        for b in self.blocks:
            x = b(x, pos, mask)
        return self.out(rms(x, self.final_norm, self.c.eps))


def _keys(w, c):
    a = c.arch
    w.string("general.architecture", a)
    # llama.cpp sets Phi-3 token attributes when general.name contains
    # "phi3" and then needs a <|endoftext|> token this vocabulary lacks
    # (llm_tokenizer load, src/llama-vocab.cpp): the phi3 file keeps the
    # plain name.
    w.string("general.name", "ragkv-xchunk" if a in ("llama", "phi3") else "ragkv-xchunk-" + a)
    w.u32(a + ".context_length", c.context)
    w.u32(a + ".embedding_length", c.dim)
    w.u32(a + ".feed_forward_length", c.hidden)
    w.u32(a + ".block_count", c.layers)
    w.u32(a + ".attention.head_count", c.heads)
    w.u32(a + ".attention.head_count_kv", c.kv_heads)
    w.u32(a + ".attention.key_length", c.head_dim)
    w.u32(a + ".attention.value_length", c.head_dim)
    w.u32(a + ".rope.dimension_count", c.head_dim)
    w.f32(a + ".attention.layer_norm_rms_epsilon", c.eps)
    w.f32(a + ".rope.freq_base", c.theta)
    if c.experts:
        w.u32(a + ".expert_count", c.experts)
        w.u32(a + ".expert_used_count", c.experts_used)
        w.u32(a + ".expert_feed_forward_length", c.expert_hidden)
    if c.window:
        w.u32(a + ".attention.sliding_window", c.window)
        w.u32(a + ".attention.sliding_window_pattern", c.pattern)
        w.f32(a + ".rope.freq_base_swa", c.theta_swa)
    tokens, types = task.vocab()
    w.string("tokenizer.ggml.model", "llama")
    w.strings("tokenizer.ggml.tokens", tokens)
    w.f32s("tokenizer.ggml.scores", [0.0] * len(tokens))
    w.i32s("tokenizer.ggml.token_type", types)
    w.u32("tokenizer.ggml.bos_token_id", 1)
    w.u32("tokenizer.ggml.eos_token_id", 2)
    w.u32("tokenizer.ggml.unknown_token_id", 0)


def _t(p):
    return p.detach().numpy().astype(np.float32)


def _fusable(w, c, fused, parts, p):
    """phi3 writes `parts` (name, Linear) as one tensor `fused`, rows
    stacked in order; the others write each part as p + name + ".weight"."""
    if c.arch == "phi3":
        w.tensor(fused, np.concatenate([_t(m.weight) for _, m in parts]))
        return
    for name, m in parts:
        w.tensor(p + name + ".weight", _t(m.weight))


def _block(w, c, p, b):
    w.tensor(p + "attn_norm.weight", _t(b.attn_norm))
    _fusable(w, c, p + "attn_qkv.weight", [("attn_q", b.wq), ("attn_k", b.wk), ("attn_v", b.wv)], p)
    if c.qk_norm:
        w.tensor(p + "attn_q_norm.weight", _t(b.q_norm))
        w.tensor(p + "attn_k_norm.weight", _t(b.k_norm))
    w.tensor(p + "attn_output.weight", _t(b.wo.weight))
    if c.gemma:
        w.tensor(p + "post_attention_norm.weight", _t(b.post_attn_norm))
    w.tensor(p + "ffn_norm.weight", _t(b.ffn_norm))
    if c.experts:  # ggml dims {d, E} and {d, f, E}: row-major (E, d), (E, f, d)
        w.tensor(p + "ffn_gate_inp.weight", _t(b.moe.router.weight))
        w.tensor(p + "ffn_gate_exps.weight", np.ascontiguousarray(_t(b.moe.gate)))
        w.tensor(p + "ffn_up_exps.weight", np.ascontiguousarray(_t(b.moe.up)))
        w.tensor(p + "ffn_down_exps.weight", np.ascontiguousarray(_t(b.moe.down)))
        return
    _fusable(w, c, p + "ffn_up.weight", [("ffn_gate", b.gate), ("ffn_up", b.up)], p)
    w.tensor(p + "ffn_down.weight", _t(b.down.weight))
    if c.gemma:
        w.tensor(p + "post_ffw_norm.weight", _t(b.post_ffn_norm))


def export(model, path):
    c = model.c
    w = gguf.Writer()
    _keys(w, c)
    w.tensor("token_embd.weight", _t(model.embed.weight))
    w.tensor("output_norm.weight", _t(model.final_norm))
    w.tensor("output.weight", _t(model.out.weight))
    for i, b in enumerate(model.blocks):
        _block(w, c, "blk.%d." % i, b)
    w.write(path)
