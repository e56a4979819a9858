#!/usr/bin/python3
"""Is the budget rule's miss on the chunker's dev prompts the run's order?
(docs/blend.md "A signal from inside the blend", session 33.) Dev only. Run
from docs/data/budget_curve:

  /usr/bin/python3 order.py GRID_DIR DUMP_DIR

GRID_DIR as curve.py; DUMP_DIR/dump_{set}.txt: the per-row errors of the
budget runs (../budget_allocation/dump_errors.patch, RAGKV_DUMP_ERR).
Replays blend::RecomputeBudget (analysis.simulate) over the run's order and
over 200 random orders of the same requests (the warm-up first each time),
with the ceiling and with debt carried; KL x full reuse read off the grids.
"""
import math, os, random, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'budget_allocation'))
from analysis import kl_at, load_set, simulate, SETS  # noqa: E402


def summary(v):
    ks = sorted(k for k, _ in v)
    ms = [m for _, m in v]
    return (f'median {ks[len(ks) // 2]:.3f}x [5%-95%: {ks[len(ks) // 20]:.3f}, '
            f'{ks[-len(ks) // 20 - 1]:.3f}] mean r {sum(ms) / len(ms):.4f}, '
            f'orders at <= 0.15x: {sum(k <= 0.15 for k in ks) / len(ks):.2f}')


def main(grid_dir, dump_dir):
    for name in SETS:
        g, _, P, R, reqs = load_set(grid_dir, dump_dir, name)
        errs = [(q['sel'], [x / math.sqrt(sum(q['E'])) for x in q['E']]) for q in reqs]
        rs = simulate(errs)[1:]
        print(f'{name} the run\'s order, ceiling: {sum(kl_at(g[p], x) for p, x in zip(P, rs)) / R:.3f}x')
        res, rng = {True: [], False: []}, random.Random(1)
        for _ in range(200):
            order = list(range(len(P)))
            rng.shuffle(order)
            for ceiling in (True, False):
                rr = simulate([errs[0]] + [errs[1 + i] for i in order], ceiling=ceiling)[1:]
                k = sum(kl_at(g[P[i]], x) for i, x in zip(order, rr)) / R
                res[ceiling].append((k, sum(rr) / len(rr)))
        print(f'{name} 200 orders, ceiling: {summary(res[True])}')
        print(f'{name} 200 orders, debt carried: {summary(res[False])}')


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
