#!/usr/bin/python3
"""The output contrast as a per-request allocation signal (docs/blend.md
"What the budget rule's allocation can reach": "A signal from inside the
blend"). Dev split only. Run from docs/data/budget_contrast:

  /usr/bin/python3 contrast.py GRID_DIR DUMP_DIR

GRID_DIR/grid_{c3,c6,u3,u6}/samples.csv: the fixed-ratio grids of
../budget_allocation (xz -dk them). DUMP_DIR/S_{set}.txt: per request (the
bench's warm-up first) the contrast's mean KL over the query rows, the last
row's KL, the share of query rows whose top-1 differs, and the selectable
rows; written by contrast_dump.patch (README.md).

Prints per set: Spearman of each contrast feature with full reuse's KL;
ratios r = clamp(c F^g, 0.02, 0.3) with c set in hindsight (mean r exactly
0.10; an oracle element), KL x full reuse read off the grid; then two online
rules that set c over a window of the recent requests' F (64, as
RecomputeBudget) and carry what was left unspent: with the ceiling (a request
spends at most the budget plus the credit) and without it (debt carried).
"""
import math, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'budget_allocation'))
from analysis import load_grid, kl_at, SETS  # noqa: E402

LO, HI, B, WIN = 0.02, 0.3, 0.10, 64


def scale(F, target):
    """c with mean(clamp(c f, LO, HI)) = target (bisection, log scale)."""
    if LO > target:
        return 0.0
    a, b = 1e-12, 1e12
    for _ in range(100):
        c = math.sqrt(a * b)
        m = sum(min(HI, max(LO, c * f)) for f in F) / len(F)
        a, b = (c, b) if m < target else (a, c)
    return a


def hindsight(F):
    c = scale(F, B)
    return [min(HI, max(LO, c * f)) for f in F]


def online(F, ceiling):
    spent, rs, win = 0.0, [], []
    for i, f in enumerate(F):
        win = (win + [f])[-WIN:]
        credit = B * i - spent
        c = scale(win, min(1.0, max(0.0, B + credit / len(win))))
        r = max(LO, min(HI, c * f))
        if ceiling:
            r = max(0.0, min(r, B + credit))
        spent += r
        rs.append(r)
    return rs


def spearman(x, y):
    def rank(v):
        o = sorted(range(len(v)), key=lambda i: v[i])
        r = [0] * len(v)
        for k, i in enumerate(o):
            r[i] = k
        return r
    rx, ry = rank(x), rank(y)
    n = len(x)
    mx, my = sum(rx) / n, sum(ry) / n
    c = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return c / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))


def main():
    for n in SETS:
        g, reuse = load_grid(f'{sys.argv[1]}/grid_{n}/samples.csv')
        P = sorted(g)
        R = sum(reuse[p] for p in P)
        S = [list(map(float, l.split())) for l in open(f'{sys.argv[2]}/S_{n}.txt')]
        assert len(S) == len(P) + 1, 'one line per prompt and the warm-up'
        ratio = lambda rs: sum(kl_at(g[p], r) for p, r in zip(P, rs)) / R  # noqa: E731
        print(f'{n}: Spearman with full reuse KL:', ', '.join(
            f'{name} {spearman([s[j] for s in S[1:]], [reuse[p] for p in P]):.2f}'
            for j, name in [(0, 'mean KL'), (1, 'last row KL'), (2, 'top-1 flips')]))
        F0 = [max(s[0], 1e-12) for s in S]
        for gm in [0.5, 0.75, 1.0, 1.5, 2.0]:
            F = [f ** gm for f in F0]
            h = hindsight(F[1:])
            on, off = online(F, True)[1:], online(F, False)[1:]
            print(f'  mean KL^{gm}: hindsight c {ratio(h):.3f}; online, ceiling {ratio(on):.3f} at '
                  f'r {sum(on) / len(on):.4f}; online, debt {ratio(off):.3f} at r {sum(off) / len(off):.4f}')
        print(f'  oracle (full reuse KL)^1, hindsight c: {ratio(hindsight([reuse[p] for p in P])):.3f}')


if __name__ == '__main__':
    main()
