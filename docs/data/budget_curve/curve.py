#!/usr/bin/python3
"""What a per-request KL curve is worth to the budget's allocation (docs/
blend.md "A signal from inside the blend", session 33). Dev split only. Run
from docs/data/budget_curve:

  /usr/bin/python3 curve.py GRID_DIR

GRID_DIR/grid_{c3,c6,u3,u6}/samples.csv: the fixed-ratio grids of
../budget_allocation (xz -dk them). S_{set}.txt (here): per request (the
bench's warm-up first) the selectable and candidate rows, then the one-layer
output contrast left when the selector's top r of the rows are exact at the
first check layer, r in CURVE_GRID (contrast_curve.patch).

Each allocation picks per request a ratio >= 0.02 minimizing model(r) +
lambda r, lambda set in hindsight for mean r 0.10 (an oracle element); the
request's KL is then read off its fixed-ratio grid. Models:
  contrast^g          the one-layer contrast curve (what a server could measure)
  bound               the true KL curve (every grid point; the session 31 bound)
  2 points at r0      the true KL at 0 and r0, exponential past r0 (oracle)
  exp fit, power fit  the true curve smoothed by a 2-parameter fit (oracle)
"""
import math, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'budget_allocation'))
from analysis import load_grid, kl_at, SETS  # noqa: E402

CURVE_GRID = [0, 0.02, 0.05, 0.10, 0.15, 0.20, 0.30]
RATIOS = [0.02, 0.03, 0.05, 0.07, 0.10, 0.12, 0.15, 0.20, 0.25, 0.30]
LO, B = 0.02, 0.10


def allocate(model, ps, ratios=RATIOS):
    def choose(lam):
        return [min(ratios, key=lambda r: model(p, r) + lam * r) for p in ps]
    lo, hi = 1e-14, 1e6
    for _ in range(200):
        lam = math.sqrt(lo * hi)
        lo, hi = (lam, hi) if sum(choose(lam)) / len(ps) > B else (lo, lam)
    return choose(hi)


def fit(g, xform):
    xs = [x for x in sorted(g) if xform(x) is not None]
    lx = [xform(x) for x in xs]
    ys = [math.log(max(g[x], 1e-12)) for x in xs]
    n, mx, my = len(xs), sum(lx) / len(lx), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(lx, ys)) / sum((x - mx) ** 2 for x in lx)
    return lambda r: math.exp(my - b * mx + b * xform(r))


def two_points(g, reuse, r0):
    a, b = reuse, kl_at(g, r0)
    rate = math.log(max(a, 1e-12) / max(b, 1e-12)) / r0
    return lambda r: kl_at(g, r) if r <= r0 else b * math.exp(-rate * (r - r0))


def main(grid_dir):
    here = os.path.dirname(os.path.abspath(__file__))
    for s in SETS:
        g, reuse = load_grid(f'{grid_dir}/grid_{s}/samples.csv')
        ps = sorted(g)
        R = sum(reuse[p] for p in ps)
        rows = [l.split() for l in open(f'{here}/S_{s}.txt')][1:]  # the warm-up first
        assert len(rows) == len(ps)
        curve = {p: dict(zip(CURVE_GRID, map(float, r[2:]))) for p, r in zip(ps, rows)}

        def report(label, model, ratios=RATIOS):
            rs = allocate(model, ps, ratios)
            k = sum(kl_at(g[p], r) for p, r in zip(ps, rs)) / R
            print(f'{s} {label}: {k:.3f}x at mean r {sum(rs) / len(rs):.4f}')

        cg = [r for r in CURVE_GRID if r >= LO]
        for e in (0.5, 1.0):
            report(f'contrast curve^{e}', lambda p, r, e=e: max(curve[p][r], 0) ** e, cg)
        report('bound on the contrast grid', lambda p, r: kl_at(g[p], r), cg)
        report('bound', lambda p, r: kl_at(g[p], r))
        for r0 in (0.02, 0.03, 0.05):
            m = {p: two_points(g[p], reuse[p], r0) for p in ps}
            report(f'2 points (0, {r0})', lambda p, r, m=m: m[p](r))
        for label, xf in (('exp fit', lambda x: x), ('power fit', lambda x: math.log(x) if x > 0 else None)):
            m = {p: fit(g[p], xf) for p in ps}
            report(label, lambda p, r, m=m: m[p](r))
        print(f'{s} fixed r = 0.10: {sum(kl_at(g[p], 0.1) for p in ps) / R:.3f}x')


if __name__ == '__main__':
    main(sys.argv[1])
