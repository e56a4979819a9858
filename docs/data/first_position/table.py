# The tables of docs/benchmarks.md "First-position records": one row per
# set, plain records and first-position records (`_fp`), from summary.json.
# Run from this directory: /usr/bin/python3 table.py
import json

SETS = [("dev", "dev"), ("test", "test"), ("outside", "out")]
SHAPES = [("chunker 3 x 128", "c3"), ("chunker 6 x 72", "c6"), ("cut 3 x 128", "u3"), ("cut 6 x 72", "u6")]


def rows(tag):
    d = json.load(open(tag + "/summary.json"))
    return {(r["strategy"], round(r["ratio"], 3)): r for r in d["rows"]}


def line(split, shape, tag):
    out = []
    for suffix in ("", "_fp"):
        r = rows(tag + suffix)
        reuse = r[("full-reuse", 0.0)]
        b = r[("cacheblend-adaptive/b=0.1", 0.3)]
        r10 = r[("cacheblend", 0.1)]
        r15 = r[("cacheblend", 0.15)]
        gap = (r15["top1"] - reuse["top1"]) / (1 - reuse["top1"])
        out.append("%.3fx [%.3f, %.3f] / %.4f | %.3fx | %.3f / %.0f%%" % (
            b["kl_vs_reuse"], *b["kl_vs_reuse_ci95"], b["mean_r"], r10["kl_vs_reuse"],
            r15["top1"], 100 * gap))
    return "| %s, %s | %s |" % (split, shape, " | ".join(out))


if __name__ == "__main__":
    print("| set | plain: budget 0.10 KL x / mean r | plain: r = 0.10 KL x | plain: r = 0.15 top-1 / top-1 gap closed "
          "| first-position: budget 0.10 | first-position: r = 0.10 | first-position: r = 0.15 top-1 / gap closed |")
    print("|---|---|---|---|---|---|---|")
    for split, pre in SETS:
        for shape, s in SHAPES:
            print(line(split, shape, pre + "_" + s))
