#!/usr/bin/python3
"""Offline analysis of the budget rule's allocation (docs/blend.md "What the
budget rule's allocation can reach"). Run from docs/data/budget_allocation:

  /usr/bin/python3 analysis.py GRID_DIR DUMP_DIR

GRID_DIR/grid_{c3,c6,u3,u6}/samples.csv: `bench engine` at fixed ratios
0.01..0.30 (xz-compressed copies here). DUMP_DIR/dump_{set}.txt: the budget
runs with dump_errors.patch applied and RAGKV_DUMP_ERR set (README.md).

Replays blend::RecomputeBudget (the ceiling, window 64, floor 0.02, cap 0.3)
over the dumped per-row errors with other units and per-request weights,
and reads each request's KL at the ratio it would get off the fixed-ratio
grid (linear between grid points). Also the per-request bound: per prompt the
grid ratio >= 0.02 (the rule's floor) minimizing KL + lambda r, lambda the
smallest with mean r <= 0.10.
"""
import bisect, csv, math, sys
from collections import defaultdict

SETS = ['c3', 'c6', 'u3', 'u6']


def load_grid(path):
    kl, reuse = defaultdict(dict), {}
    for r in csv.DictReader(open(path)):
        p = int(r['prompt'])
        if r['strategy'] == 'full-reuse':
            reuse[p] = float(r['kl'])
        if r['strategy'] == 'cacheblend':
            kl[p][float(r['ratio'])] = float(r['kl'])
    for p in kl:
        kl[p][0.0] = reuse[p]
    return kl, reuse


def kl_at(g, r):
    xs = sorted(g)
    if r >= xs[-1]:
        return g[xs[-1]]
    i = bisect.bisect_right(xs, r) - 1
    a, b = xs[i], xs[i + 1]
    return g[a] + (g[b] - g[a]) * (r - a) / (b - a)


def parse_dump(path):
    """Requests in order (the bench's warm-up first): selectable, D (relative
    deviation / (query rows x heads)), W (look-ahead mass after the first
    check), E (the rule's e_i = D x the check layer's attention)."""
    reqs, cur, pending = [], None, False
    for line in open(path):
        v = line.split()
        if v[0] == 'D':
            cur, pending = {'sel': int(v[1]), 'D': [float(x) for x in v[2:]]}, True
        elif v[0] == 'W' and pending and 'W' not in cur:
            cur['W'] = [float(x) for x in v[2:]]
        elif v[0] == 'E' and pending:
            cur['E'] = [float(x) for x in v[2:]]
        elif v[0] == 'S' and pending:
            reqs.append(cur)
            pending = False
    return reqs


def load_set(grid_dir, dump_dir, name):
    """One dev set: its grid, full reuse's KL per prompt, the prompts, their
    summed full-reuse KL, and the dumped requests (the warm-up first)."""
    g, reuse = load_grid(f'{grid_dir}/grid_{name}/samples.csv')
    P = sorted(g)
    return g, reuse, P, sum(reuse[p] for p in P), parse_dump(f'{dump_dir}/dump_{name}.txt')


def simulate(errs, budget=0.1, window=64, rmin=0.02, rmax=0.3, ceiling=True):
    """RecomputeBudget::Count over (selectable, values) per request."""
    win, spent, rs = [], 0.0, []
    for sel, e in errs:
        vals = sorted([x for x in e if x > 0], reverse=True)[:math.ceil(rmax * sel) + 1]
        win = (win + [(vals, sel)])[-window:]
        credit = budget * len(rs) - spent
        target = min(1, max(0, budget + credit / len(win)))

        def mean(t):
            return sum(min(rmax, max(rmin, sum(1 for x in v if x >= t) / s)) for v, s in win) / len(win)

        cands, t = sorted(set(x for v, _ in win for x in v)), math.inf
        if mean(math.inf) <= target:
            lo, hi = 0, len(cands)
            while lo < hi:
                m = (lo + hi) // 2
                lo, hi = (lo, m) if mean(cands[m]) <= target else (m + 1, hi)
            t = cands[hi] if hi < len(cands) else math.inf
        k = sum(1 for x in vals if x >= t)
        if ceiling:
            k = min(k, max(0, math.floor((budget + credit) * sel + 1e-9)))
        r = min(rmax, max(rmin, k / sel))
        spent += r
        rs.append(r)
    return rs


def per_request_bound(g, P, budget=0.1, floor=0.02):
    # The grid ratios the rule could give: at least its floor (0.02).
    for i in range(4000):
        lam = i * 0.0002
        pick = [min(((r, k) for r, k in g[p].items() if r >= floor - 1e-9),
                    key=lambda kv: kv[1] + lam * kv[0]) for p in P]
        if sum(c[0] for c in pick) / len(P) <= budget:
            return sum(c[1] for c in pick), sum(c[0] for c in pick) / len(P)


UNITS = {
    'a*d (the rule)': lambda q: q['E'],
    'a^2*d': lambda q: [e * e / d if d > 0 else 0 for e, d in zip(q['E'], q['D'])],
    'sqrt(a)*d': lambda q: [math.sqrt(e * d) if d > 0 else 0 for e, d in zip(q['E'], q['D'])],
    'W*d': lambda q: [w * d for w, d in zip(q['W'], q['D'])],
    'W^2*d': lambda q: [w * w * d for w, d in zip(q['W'], q['D'])],
    '(a+W)*d': lambda q: [e + w * d for e, w, d in zip(q['E'], q['W'], q['D'])],
}


def main(grid_dir, dump_dir):
    for name in SETS:
        g, reuse, P, R, reqs = load_set(grid_dir, dump_dir, name)
        assert len(reqs) == len(P) + 1, 'the warm-up request, then one per prompt'
        kl, r = per_request_bound(g, P)
        print(f'{name} per-request bound: {kl / R:.4f} at mean r {r:.4f}')
        for r0 in (0.10, 0.15):
            print(f'{name} fixed r = {r0}: {sum(g[p][r0] for p in P) / R:.4f}')

        def report(label, errs, ceiling=True):
            rs = simulate(errs, ceiling=ceiling)[1:]
            k = sum(kl_at(g[p], x) for p, x in zip(P, rs)) / R
            print(f'{name} {label}: {k:.4f} at mean r {sum(rs) / len(rs):.4f}')

        for un, u in UNITS.items():
            for beta in (-0.5, 0.0):
                errs = []
                for q in reqs:
                    v = u(q)
                    s = sum(x for x in v if x > 0)
                    errs.append((q['sel'], [x * s ** beta for x in v] if s > 0 else v))
                report(f'unit {un}, x (sum)^{beta}', errs)
        weights = {'reuse KL (oracle)': reuse,
                   'KL(0.05) - KL(0.15) (oracle)': {p: max(1e-9, g[p][0.05] - g[p][0.15]) for p in P}}
        for label, w in weights.items():
            ws = [w[P[0]]] + [w[p] for p in P]
            errs = [(q['sel'], [x / math.sqrt(sum(q['E'])) * wi for x in q['E']]) for q, wi in zip(reqs, ws)]
            report(f'the rule x request weight {label}', errs)
        errs = [(q['sel'], [x / math.sqrt(sum(q['E'])) for x in q['E']]) for q in reqs]
        report('the rule without the ceiling', errs, ceiling=False)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
