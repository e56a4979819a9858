"""corpus.py: the demo checkpoint's text and tokenizer (docs/demo_model.md).

The text is the project's own prose: README.md and docs/*.md (sorted, this
file's own doc docs/demo_model.md left out; of the work tree, or of a commit), without fenced code blocks,
table rows and HTML lines. It is cut into sections (a markdown heading and
the paragraphs under it); those are the "documents" of the training
samples.

The tokenizer is a SentencePiece-style vocabulary (tokenizer.ggml.model =
"llama"): <unk> <s> </s>, the 256 byte-fallback tokens <0x00>..<0xFF>, the
single characters of the text ("▁" for a space), then the pieces of a BPE
learned on the text, scored -rank so that SentencePiece's greedy
highest-score merge (llama.cpp's llm_tokenizer_spm, ragkv's LlamaTokenizer)
replays the BPE. Two rules keep both C++ tokenizers equal to `encode` here:
no learned piece mixes a newline with other characters (so text can be
encoded line by line), and no learned piece is a multi-character substring
of a control or byte token's text (so no merge can form "<s>" or "<0x0A>").
"""

import collections
import glob
import heapq
import os
import re
import subprocess

SPACE = "\u2581"
CONTROL = ["<unk>", "<s>", "</s>"]
BYTES = ["<0x%02X>" % b for b in range(256)]
# The chat layout the server builds (server/prompt.h, chatml): its fixed
# strings are part of the BPE text so that they take few tokens.
CHATML = ["<|im_start|>", "<|im_end|>", "system", "user", "assistant"]


def doc_files(root, rev=None):
    """README.md and docs/*.md (sorted), of the work tree or of commit rev."""
    if rev:
        names = subprocess.run(["git", "-C", root, "ls-tree", "--name-only", rev, "docs/"],
                               check=True, capture_output=True, text=True).stdout.split()
        docs = sorted(n for n in names if n.endswith(".md"))
    else:
        docs = sorted(os.path.relpath(f, root) for f in glob.glob(os.path.join(root, "docs", "*.md")))
    return ["README.md"] + [d for d in docs if os.path.basename(d) != "demo_model.md"]


def read(root, name, rev=None):
    if rev:
        return subprocess.run(["git", "-C", root, "show", "%s:%s" % (rev, name)], check=True,
                              capture_output=True).stdout.decode("utf-8")
    with open(os.path.join(root, name), encoding="utf-8") as f:
        return f.read()


def prose(text):
    """Markdown -> its prose lines: no fenced code, tables or HTML."""
    out, fenced = [], False
    for line in text.split("\n"):
        s = line.strip()
        if s.startswith("```"):
            fenced = not fenced
            continue
        if fenced or s.startswith("|") or s.startswith("<"):
            continue
        out.append(line.rstrip())
    return "\n".join(out)


def sections(root, rev=None):
    """[(title, [paragraph, ...])] of every doc, in file order; paragraphs
    are the blank-line separated blocks under a heading, joined lines."""
    out = []
    for path in doc_files(root, rev):
        text = prose(read(root, path, rev))
        title, paras = os.path.basename(path), []
        for block in re.split(r"\n\s*\n", text):
            lines = [l.strip() for l in block.split("\n") if l.strip()]
            if not lines:
                continue
            if lines[0].startswith("#"):
                if paras:
                    out.append((title, paras))
                title, paras = lines[0].lstrip("#").strip(), []
                lines = lines[1:]
                if not lines:
                    continue
            paras.append(" ".join(lines))
        if paras:
            out.append((title, paras))
    return out


def corpus_text(root, rev=None):
    """The whole training prose, as the sections give it."""
    parts = []
    for title, paras in sections(root, rev):
        parts.append(title + "\n" + "\n\n".join(paras))
    return "\n\n".join(parts)


def _units(text):
    """BPE pre-split: runs of newlines, runs of spaces, and words with at
    most one leading space (▁)."""
    t = SPACE + text.replace(" ", SPACE)
    return re.findall("\n+|%s+(?=%s|\n|$)|%s?[^%s\n]+" % (SPACE, SPACE, SPACE, SPACE), t)


def _forbidden():
    bad = set()
    for s in CONTROL + BYTES:
        for i in range(len(s)):
            for j in range(i + 2, len(s) + 1):
                bad.add(s[i:j])
    return bad


def learn(text, vocab_size, extra_counts=None, min_char_count=2):
    """(pieces, scores, types) of a vocabulary of at most vocab_size."""
    words = collections.Counter(_units(text))
    for w, n in (extra_counts or {}).items():
        for u in _units(w):
            words[u] += n
    chars = collections.Counter()
    for w, n in words.items():
        for c in w:
            chars[c] += n
    alphabet = sorted(c for c, n in chars.items() if n >= min_char_count or c.isascii())
    pieces = CONTROL + BYTES + alphabet
    types = [2, 3, 3] + [6] * 256 + [1] * len(alphabet)
    scores = [0.0] * len(pieces)
    have = set(alphabet)
    forbidden = _forbidden()
    # Words as symbol lists (characters outside the alphabet split words:
    # they become byte tokens and never merge).
    seqs, counts = [], []
    for w, n in words.items():
        cur = []
        for c in w:
            if c in have:
                cur.append(c)
            else:
                if len(cur) > 1:
                    seqs.append(cur), counts.append(n)
                cur = []
        if len(cur) > 1:
            seqs.append(cur), counts.append(n)
    pair_n = collections.Counter()
    where = collections.defaultdict(set)
    for i, s in enumerate(seqs):
        for a, b in zip(s, s[1:]):
            pair_n[(a, b)] += counts[i]
            where[(a, b)].add(i)
    heap = [(-n, p) for p, n in pair_n.items()]
    heapq.heapify(heap)
    rank = 0
    while len(pieces) < vocab_size and heap:
        n, p = heapq.heappop(heap)
        if -n != pair_n.get(p, 0) or -n < 2:
            continue  # stale
        merged = p[0] + p[1]
        if merged in forbidden or merged in have or ("\n" in merged and merged.strip("\n")):
            pair_n[p] = 0
            continue
        rank += 1
        pieces.append(merged)
        types.append(1)
        scores.append(-float(rank))
        have.add(merged)
        for i in list(where[p]):
            s, c = seqs[i], counts[i]
            for a, b in zip(s, s[1:]):
                pair_n[(a, b)] -= c
            out, k = [], 0
            while k < len(s):
                if k + 1 < len(s) and s[k] == p[0] and s[k + 1] == p[1]:
                    out.append(merged)
                    k += 2
                else:
                    out.append(s[k])
                    k += 1
            seqs[i] = out
            for a, b in zip(out, out[1:]):
                pair_n[(a, b)] += c
                where[(a, b)].add(i)
                heapq.heappush(heap, (-pair_n[(a, b)], (a, b)))
        pair_n[p] = 0
    return pieces, scores, types


class Tokenizer:
    """SentencePiece greedy encoding as llama.cpp's llm_tokenizer_spm and
    ragkv's LlamaTokenizer do it (highest score first, leftmost on ties,
    byte fallback for characters outside the vocabulary)."""

    def __init__(self, pieces, scores, types):
        self.pieces, self.scores = pieces, scores
        self.id = {}
        for i, (p, t) in enumerate(zip(pieces, types)):
            if t == 1:
                self.id.setdefault(p, i)
        self.cache = {}

    def _encode_line(self, s):
        ids = self.cache.get(s)
        if ids is not None:
            return ids
        sym = list(s)
        heap = []

        def push(i, j):
            m = self.id.get(sym_text[i] + sym_text[j])
            if m is not None:
                heapq.heappush(heap, (-self.scores[m], i, j, sym_text[i], sym_text[j]))

        sym_text = sym
        nxt = list(range(1, len(sym))) + [-1]
        prv = list(range(-1, len(sym) - 1))
        alive = [True] * len(sym)
        for i in range(len(sym) - 1):
            push(i, i + 1)
        while heap:
            _, i, j, a, b = heapq.heappop(heap)
            if not alive[i] or not alive[j] or nxt[i] != j or sym_text[i] != a or sym_text[j] != b:
                continue
            sym_text[i] = a + b
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[j] >= 0:
                prv[nxt[j]] = i
            if prv[i] >= 0:
                push(prv[i], i)
            if nxt[i] >= 0:
                push(i, nxt[i])
        ids, i = [], 0
        while i >= 0 and len(sym):
            t = self.id.get(sym_text[i])
            if t is not None:
                ids.append(t)
            else:
                ids.extend(3 + b for b in sym_text[i].encode("utf-8"))
            i = nxt[i]
        self.cache[s] = ids
        return ids

    def encode(self, text, prefix=True):
        """Token ids of text (no BOS), with the dummy-prefix space when
        prefix (as a fragment that starts a prompt)."""
        t = text.replace(" ", SPACE)
        if prefix and text:
            t = SPACE + t
        ids = []
        for part in re.split("(\n+)", t):
            if part:
                ids.extend(self._encode_line(part))
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            if 3 <= i < 259:
                out.append(i - 3)
            elif i >= 259:
                out += self.pieces[i].replace(SPACE, " ").encode("utf-8")
        return out.decode("utf-8", errors="replace")
