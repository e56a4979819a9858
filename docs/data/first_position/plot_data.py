# plot.dat for plot.gp: per set, the budget rule's KL x full reuse (and its
# 95% interval) with plain and with first-position records.
import json
from table import SETS, SHAPES

with open("plot.dat", "w") as f:
    f.write("# set plain lo hi first lo hi\n")
    for split, pre in SETS:
        for shape, s in SHAPES:
            vals = []
            for suffix in ("", "_fp"):
                d = json.load(open(pre + "_" + s + suffix + "/summary.json"))
                b = [r for r in d["rows"] if r["strategy"] == "cacheblend-adaptive/b=0.1"][0]
                vals += [b["kl_vs_reuse"], *b["kl_vs_reuse_ci95"]]
            f.write('"%s %s" %s\n' % (split, s, " ".join("%.4f" % v for v in vals)))
