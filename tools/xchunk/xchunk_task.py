"""xchunk_task.py: the cross-chunk binding task (docs/xchunk.md).

A prompt is BOS, then P key/value pairs "k v" (keys distinct, drawn from 64
key tokens; values uniform over 16 value tokens), then queries "? k" whose
answer is the value that followed k. The C++ bench (bench/blend/xchunk_task.cc)
generates evaluation prompts of the same grammar from its own seeded RNG and
splits the pairs into passages so that every passage boundary falls between a
key and its value; the question asks for a key whose value opens the next
passage. Precomputed alone, that value's KV cannot know which key it belongs
to, which is what makes full KV reuse fail.
"""

N_KEYS = 64
N_VALUES = 16


def vocab():
    """Token strings and types (SentencePiece-style, as llama.cpp reads them)."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [2, 3, 3]
    for b in range(256):
        tokens.append("<0x%02X>" % b)
        types.append(6)
    tokens.append("\u2581?")
    types.append(1)
    tokens += ["\u2581k%02d" % i for i in range(N_KEYS)]
    tokens += ["\u2581v%02d" % i for i in range(N_VALUES)]
    types += [1] * (N_KEYS + N_VALUES)
    return tokens, types


BOS = 1
QUERY = 259
KEY0 = 260
VALUE0 = KEY0 + N_KEYS
VOCAB = VALUE0 + N_VALUES  # 340


def training_batch(rng, batch, pairs_min, pairs_max, queries):
    """Token ids [batch, T] and the positions whose next token is an answer.

    Returns (ids, targets) as lists; targets[b] holds (position, answer) with
    `position` the index of the queried key token (its logits predict the
    answer). Every row of a batch has the same number of pairs.
    """
    pairs = rng.randint(pairs_min, pairs_max)
    ids, targets = [], []
    for _ in range(batch):
        keys = rng.sample(range(N_KEYS), pairs)
        values = [rng.randrange(N_VALUES) for _ in range(pairs)]
        row = [BOS]
        for k, v in zip(keys, values):
            row += [KEY0 + k, VALUE0 + v]
        tgt = []
        for _ in range(queries):
            i = rng.randrange(pairs)
            row += [QUERY, KEY0 + keys[i]]
            tgt.append((len(row) - 1, VALUE0 + values[i]))
            row.append(VALUE0 + values[i])
        ids.append(row)
        targets.append(tgt)
    return ids, targets


def copy_batch(rng, batch, pairs_min, pairs_max):
    """A warm-up signal for the lookup heads: BOS, a random key/value
    sequence, then the same sequence again; every token of the repeat after
    its first is predictable by looking up what followed its previous
    occurrence (an induction head), which the answer of a query needs too.
    Same return shape as training_batch."""
    pairs = rng.randint(pairs_min, pairs_max)
    ids, targets = [], []
    for _ in range(batch):
        keys = rng.sample(range(N_KEYS), pairs)
        seq = []
        for k in keys:
            seq += [KEY0 + k, VALUE0 + rng.randrange(N_VALUES)]
        row = [BOS] + seq + seq
        start = 1 + len(seq)
        targets.append([(p, row[p + 1]) for p in range(start, len(row) - 1)])
        ids.append(row)
    return ids, targets
