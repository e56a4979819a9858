# Offline replay (dev only): does the output change between two successive
# ratios (KL(blend at r_{k+1} || blend at r_k), measurable by a server that
# blends twice) tell a request when to stop recomputing, better than the
# budget rule's per-row errors? Input: RAGKV_DUMP_CONV lines
# "prompt ratio kl_vs_full kl(next||this)" from bench quality (patch in this dir).
import sys
import numpy as np

def load(path):
    rows = [l.split() for l in open(path)]
    P = max(int(r[0]) for r in rows) + 1
    R = sorted({float(r[1]) for r in rows})
    T = np.zeros((P, len(R))); D = np.full((P, len(R)), np.nan)
    for p, r, kl, nx in rows:
        k = R.index(float(r)); T[int(p), k] = float(kl); D[int(p), k] = float(nx)
    return np.array(R), T, D

def bound(R, T, budget, floor_k=1):
    best = None
    for lam in np.geomspace(1e-5, 10, 400):
        ks = [floor_k + int(np.argmin(T[i, floor_k:] + lam * R[floor_k:])) for i in range(len(T))]
        r = R[ks].mean()
        if r <= budget + 1e-9:
            kl = T[np.arange(len(T)), ks].mean()
            if best is None or kl < best[0]: best = (kl, r)
    return best

def walk(R, T, D, lam, start=1, rel=False):
    # At r_k (from r_start), blend at r_{k+1} too; stop when the change per unit r
    # is below lam (rel: relative to the change full reuse -> r_start); answer
    # and cost: r_{k+1}.
    K = len(R); ks = []
    for i in range(len(T)):
        k = start
        scale = D[i, 0] if rel else 1.0
        while k + 1 < K:
            if D[i, k] / (R[k + 1] - R[k]) < lam * scale: k += 1; break
            k += 1
        ks.append(min(k, K - 1))
    ks = np.array(ks)
    return T[np.arange(len(T)), ks].mean(), R[ks].mean()

def hindsight_walk(R, T, D, budget, rel=False):
    best = None
    for lam in np.geomspace(1e-6, 100, 600):
        kl, r = walk(R, T, D, lam, rel=rel)
        if r <= budget + 1e-9 and (best is None or kl < best[0]): best = (kl, r, lam)
    return best

def spearman(a, b):
    ra = np.argsort(np.argsort(a)); rb = np.argsort(np.argsort(b))
    return np.corrcoef(ra, rb)[0, 1]

for path in sys.argv[1:]:
    R, T, D = load(path)
    reuse = T[:, 0].mean()
    k10 = list(np.round(R, 4)).index(0.10)
    print(f"== {path}: {len(T)} prompts, full reuse KL {reuse:.6f}")
    print(f"fixed r=0.10: {T[:, k10].mean() / reuse:.3f}x")
    kl, r = bound(R, T, 0.10)
    print(f"per-request bound (truth, hindsight lambda): {kl / reuse:.3f}x at mean r {r:.4f}")
    for rel in (False, True):
        kl, r, lam = hindsight_walk(R, T, D, 0.10, rel)
        print(f"convergence walk{' (relative to the first step)' if rel else ''}, hindsight lambda {lam:.3g}: {kl / reuse:.3f}x at mean r {r:.4f}")
    # How the proxy tracks the true marginal gain, per step.
    gain = T[:, 1:-1] - T[:, 2:]; prox = D[:, 1:-1]
    print(f"Spearman(D_k, true gain T_k - T_k+1) pooled: {spearman(prox.ravel(), gain.ravel()):.3f}")
    print(f"Spearman(D_0 = KL(r=0.02 || reuse), full reuse KL) per prompt: {spearman(D[:, 0], T[:, 0]):.3f}")

def by_feature(R, T, F, budget, g):
    best = None
    for c in np.geomspace(1e-3, 1e3, 800):
        r = np.clip(c * F ** g, R[1], R[-1])
        ks = np.array([int(np.argmin(np.abs(R - x))) for x in r])
        kl, mr = T[np.arange(len(T)), ks].mean(), R[ks].mean()
        if mr <= budget + 1e-9 and (best is None or kl < best[0]): best = (kl, mr)
    return best

print("\n-- ratio in proportion to a per-request feature, hindsight scale (grid-snapped) --")
for path in sys.argv[1:]:
    R, T, D = load(path)
    reuse = T[:, 0].mean()
    for name, F in (("D0 = KL(r=0.02 || full reuse)", D[:, 0]), ("oracle: full reuse KL", T[:, 0])):
        out = []
        for g in (0.5, 0.75, 1.0):
            kl, mr = by_feature(R, T, F, 0.10, g)
            out.append(f"g={g}: {kl / reuse:.3f}x/{mr:.3f}")
        print(f"{path.split('/')[-1]} {name}: " + ", ".join(out))

def walk_one(R, D, i, lam, kmax):
    k = 1
    while k + 1 <= kmax:
        if D[i, k] / (R[k + 1] - R[k]) < lam: return k + 1
        k += 1
    return kmax

def online(R, T, D, budget, order, eta=0.5, lam0=0.005):
    # lambda follows the running spend (multiplicative); the ceiling: a request
    # may go to at most the budget plus what earlier requests left unspent.
    lam, spent, ks = lam0, 0.0, []
    for n, i in enumerate(order):
        credit = budget * (n + 1) - spent
        kmax = max(1, max(k for k in range(len(R)) if R[k] <= credit + 1e-12))
        k = walk_one(R, D, i, lam, kmax)
        ks.append((i, k)); spent += R[k]
        lam *= np.exp(eta * (R[k] - budget) / budget)
    idx = np.array([i for i, _ in ks]); kk = np.array([k for _, k in ks])
    return T[idx, kk].mean(), R[kk].mean()

print("\n-- the walk online (lambda follows the spend, ceiling), 200 random orders: median [5%, 95%] --")
rng = np.random.default_rng(7)
for path in sys.argv[1:]:
    R, T, D = load(path)
    reuse = T[:, 0].mean()
    for eta in (0.25, 0.5, 1.0):
        res = np.array([online(R, T, D, 0.10, rng.permutation(len(T)), eta) for _ in range(200)])
        q = np.percentile(res[:, 0] / reuse, [50, 5, 95])
        print(f"{path.split('/')[-1]} eta={eta}: {q[0]:.3f}x [{q[1]:.3f}, {q[2]:.3f}] at mean r {np.median(res[:, 1]):.4f}")
