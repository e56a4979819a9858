# Screen: each request gets r = clamp(c x F^g, 0.02, 0.3), c set in hindsight so mean r = 0.10
# (an oracle element), F a per-request feature. Usage: proportional.py GRID_DIR DUMP_DIR
import sys, math
sys.path.insert(0, __import__('os').path.dirname(__file__))
from analysis import *
def alloc(F, target=0.1, lo=0.02, hi=0.3):
    a,b=1e-12,1e12
    for _ in range(200):
        c=math.sqrt(a*b); m=sum(min(hi,max(lo,c*f)) for f in F)/len(F)
        a,b=(c,b) if m<target else (a,c)
    return [min(hi,max(lo,c*f)) for f in F]
for name in SETS:
    g,reuse=load_grid(f'{sys.argv[1]}/grid_{name}/samples.csv'); reqs=parse_dump(f'{sys.argv[2]}/dump_{name}.txt')[1:]
    P=sorted(g); R=sum(reuse[p] for p in P)
    feats={'sumE':[sum(q['E']) for q in reqs],'meanE':[sum(q['E'])/len(q['E']) for q in reqs],
           'sumWD':[sum(w*d for w,d in zip(q['W'],q['D'])) for q in reqs],
           'reuseKL*':[reuse[p] for p in P]}
    out=[]
    for k,F in feats.items():
        for gm in [0.5,1.0]:
            rs=alloc([f**gm for f in F])
            out.append(f"{k}^{gm} {sum(kl_at(g[p],r) for p,r in zip(P,rs))/R:.3f}")
    print(name,' | '.join(out))
