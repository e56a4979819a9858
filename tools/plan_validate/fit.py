#!/usr/bin/python3
"""fit.py: the planner's CPU validation (docs/planner_cpu_validation.md).

Reads run.sh's raw outputs (DATA, default docs/data/plan_cpu), fits the two
rates of the per-operator roofline (compute GFLOP/s, bandwidth GB/s) on the
fitted shapes only, predicts every shape with them, and writes the table
(DATA/fit.md) and a plot (PNG, with gnuplot).

  /usr/bin/python3 tools/plan_validate/fit.py [DATA] [PNG]

The prediction of a phase is the sum over its operators of
max(compute time, bytes / bandwidth), the FLOPs, bytes and compute times
being the ones `ragkv plan --json` prints; a blend's KV load is its bytes at
the bandwidth (KV from RAM). Three numbers are fitted:
  - s, the scale of the weight GEMMs' rate by row count: run.sh plans every
    shape with one table g(rows) (GEMM_ROWS, docs/data/plan_cpu/gemm_rows.txt:
    a one-thread kernel calibration on the fitted shapes), so an operator's
    `compute_ms` is the sum over layers of its FLOPs / g(its rows), and its
    compute time here is compute_ms / s;
  - attention's rate (attn.score, attn.value: the runtime's attention kernel
    is not a weight GEMM and runs at its own rate), on their FLOPs;
  - one bandwidth.
Shapes whose files are missing (not measured yet) are skipped.
"""
import json
import math
import os
import re
import subprocess
import sys

FITTED = ("F1", "F2")
# Held out before 2026-12-06 23:15 UTC and looked at since (reported, not
# evidence for a change made after); the rest of SHAPES are the new held-out
# shapes of docs/planner_cpu_validation.md "The Blender's runtime path
# against Model::Prefill, and new held-out shapes".
SEEN = ("H1", "H2", "H3", "M1", "M2", "H4", "H5", "H6", "H7", "M3")
# The phases the rates are fitted on. The blend phase is predicted, never
# fitted: its operator list (blend/plan_ops.cc BlendPhase) leaves out stages
# the Blender runs (docs/planner_cpu_validation.md), and fitting the rates to
# it would bend prefill and decode to hide that.
FIT_PHASES = ("prefill", "decode")
SHAPES = ("F1", "F2", "H1", "H2", "H3", "M1", "M2", "H4", "H5", "H6", "H7", "M3", "H8", "H9", "M4")


class Stale(Exception):
    """A plan JSON written before `compute_ms` existed."""


def plan_phase(path, prefix):
    with open(path) as f:
        d = json.load(f)
    for p in d["phases"]:
        if p["phase"].startswith(prefix):
            if any("compute_ms" not in o for o in p["ops"]):
                raise Stale(f"{path}: planned before the rate by rows (no compute_ms); "
                            "run calibrate.sh, then PLAN_ONLY=1 run.sh")
            return [(o["op"], o["flops"], o["bytes"], o["compute_ms"] / 1e3) for o in p["ops"]]
    raise SystemExit(f"{path}: no phase {prefix!r}")


ATTENTION = ("attn.score", "attn.value")


def predict(ops, rates):
    """rates: (s: scale of the GEMM table, attention FLOP/s, bytes/s)."""
    sc, ra, rm = rates
    t = 0.0
    for name, flops, nbytes, compute_s in ops:
        if name.startswith("kv_load"):
            t += nbytes / rm
        elif name in ATTENTION:
            t += max(flops / ra, nbytes / rm)
        else:  # weight GEMMs at the table's rate for their rows (0 for byte-only ops)
            t += max(compute_s / sc, nbytes / rm)
    return t * 1e3  # ms


def gemm_table(data):
    """The (rows, GFLOP/s) table run.sh planned with."""
    text = open(f"{data}/gemm_rows.txt").read().split()[0]
    return [tuple(float(v) for v in item.split(":")) for item in text.split(",")]


def read_prefill(path):
    text = open(path).read()
    out = {}
    for m in re.finditer(r"^\s+(\d+)\s+[\d.]+\s+([\d.]+)\s+\d+\s", text, re.M):
        out[f"prefill {m.group(1)}"] = float(m.group(2))
    llama = {}
    for m in re.finditer(r"^\s+(\d+)\s+\d+\s+(\d+)\s+[\d.]+x$", text, re.M):
        llama[f"prefill {m.group(1)}"] = int(m.group(1)) / float(m.group(2)) * 1e3
    m = re.search(r"decode \(16 steps after (\d+) tokens.*ragkv ([\d.]+) tok/s, llama.cpp ([\d.]+)", text)
    out["decode b=1"] = 1e3 / float(m.group(2))
    llama["decode b=1"] = 1e3 / float(m.group(3))
    return out, llama


def read_blend(path):
    text = open(path).read()
    full = float(re.search(r"^full-prefill: ([\d.]+) s", text, re.M).group(1))
    blend = float(re.search(r"^blend-gradual r=0.15: ([\d.]+) s", text, re.M).group(1))
    return {"prefill 1568": full * 1e3, "blend r=0.15": blend * 1e3}


def load(data):
    rows = []  # (shape, phase, measured ms, llama.cpp ms or None, ops)
    for s in SHAPES:
        if not os.path.exists(f"{data}/{s}.blend.txt"):
            print(f"# {s}: not measured, skipped", file=sys.stderr)
            continue
        meas, llama = read_prefill(f"{data}/{s}.prefill.txt")
        meas.update(read_blend(f"{data}/{s}.blend.txt"))
        try:
            ops = {
                "prefill 512": plan_phase(f"{data}/{s}.plan512.json", "prefill"),
                "prefill 2048": plan_phase(f"{data}/{s}.plan2048.json", "prefill"),
                "decode b=1": plan_phase(f"{data}/{s}.plan512.json", "decode"),
                "prefill 1568": plan_phase(f"{data}/{s}.planblend.json", "prefill"),
                "blend r=0.15": plan_phase(f"{data}/{s}.planblend.json", "blend r=0.15"),
            }
        except Stale as e:
            if s in FITTED:
                raise SystemExit(str(e))
            print(f"# {s} skipped: {e}", file=sys.stderr)
            continue
        for phase, o in ops.items():
            rows.append((s, phase, meas[phase], llama.get(phase), o))
    return rows


def fit(rows, col=2):
    """Least squares of log(pred / meas) over the fitted shapes: a log grid, refined.
    col 2: ragkv's measurements, 3: llama.cpp's. Returns (s, attention
    GFLOP/s, GB/s); s is dimensionless (x 1e9 below like the rates, undone in
    table())."""
    pts = [(r[col], r[4]) for r in rows
           if r[0] in FITTED and r[1].startswith(FIT_PHASES) and r[col]]

    def loss(x):
        rates = tuple(math.exp(v) * 1e9 for v in x)
        return sum(math.log(predict(o, rates) / m) ** 2 for m, o in pts)

    x, step = (math.log(1e-9), math.log(50.0), math.log(10.0)), 1.0
    steps = [(i, j, k) for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)]
    while step > 1e-4:
        best = min((loss(y), y) for y in
                   (tuple(v + d * step for v, d in zip(x, ds)) for ds in steps))[1]
        if best == x:
            step /= 2
        x = best
    return tuple(math.exp(v) for v in x)


def role_of(s, phase):
    if s in FITTED:
        return "fitted" if phase.startswith(FIT_PHASES) else "predicted"
    return "held out, seen before" if s in SEEN else "**held out, new**"


def table(rows, rates, lrates, gtab):
    g = ", ".join(f"{int(r)}: {v * rates[0] * 1e9:.1f}" for r, v in gtab)
    lg = ", ".join(f"{int(r)}: {v * lrates[0] * 1e9:.1f}" for r, v in gtab)
    lines = [
        f"ragkv's rates, fitted on {', '.join(FITTED)} (prefill, decode): weight GEMMs "
        f"s = {rates[0] * 1e9:.3f} x the table, i.e. GFLOP/s by rows {{{g}}}; attention "
        f"{rates[1]:.1f} GFLOP/s, bandwidth {rates[2]:.2f} GB/s.",
        f"llama.cpp's rates (the second check), fitted the same way on its own measurements: "
        f"s = {lrates[0] * 1e9:.3f} ({{{lg}}}), {lrates[1]:.1f} GFLOP/s, {lrates[2]:.2f} GB/s.",
        "",
        "| shape | role | phase | ragkv measured ms | predicted ms | **pred / meas** "
        "| llama.cpp measured ms | predicted ms | pred / meas |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    groups = {}  # (engine, group) -> [pred / meas]
    for s, phase, meas, llama, ops in rows:
        pred = predict(ops, tuple(v * 1e9 for v in rates))
        role = role_of(s, phase)
        group = "fitted shapes" if s in FITTED else ("seen held-out" if s in SEEN else "new held-out")
        groups.setdefault(("ragkv", group), []).append(pred / meas)
        lcol = "- | - | -"
        if llama:
            lpred = predict(ops, tuple(v * 1e9 for v in lrates))
            lcol = f"{llama:.1f} | {lpred:.1f} | {lpred / llama:.2f}"
            groups.setdefault(("llama.cpp", group), []).append(lpred / llama)
        lines.append(f"| {s} | {role} | {phase} | {meas:.1f} | {pred:.1f} | **{pred / meas:.2f}** | {lcol} |")
    lines.append("")
    for (name, group), xs in groups.items():
        worst = max((abs(x - 1) for x in xs), default=0)
        inside = sum(abs(x - 1) <= 0.15 for x in xs)
        inside10 = sum(abs(x - 1) <= 0.10 for x in xs)
        lines.append(f"- {name}, {group}: {inside} of {len(xs)} within +-15% ({inside10} within "
                     f"+-10%); worst {worst * 100:.0f}% off.")
    return "\n".join(lines) + "\n"


def plot(rows, rates, png):
    dat = png + ".dat"
    with open(dat, "w") as f:
        for s, phase, meas, _, ops in rows:
            kind = 0 if s in FITTED else (1 if s in SEEN else 2)
            f.write(f"{meas} {predict(ops, tuple(v * 1e9 for v in rates))} {kind}\n")
    gp = (
        "set terminal pngcairo size 700,600 font ',10'\n"
        f"set output '{png}'\nset logscale xy\nset grid\n"
        "set xlabel 'measured ms (ragkv runtime, 1 thread)'\nset ylabel 'predicted ms (ragkv plan)'\n"
        f"set title 'Planner on this CPU: fitted on {'+'.join(FITTED)} (GEMM rate by rows)'\nset key top left\n"
        f"plot '{dat}' u 1:($3==0?$2:1/0) w p pt 7 ps 1.3 t 'fitted shapes', "
        f"'' u 1:($3==1?$2:1/0) w p pt 4 ps 1.1 t 'held out, seen before', "
        f"'' u 1:($3==2?$2:1/0) w p pt 5 ps 1.5 t 'held out, new (H8, H9, M4)', "
        "x w l dt 1 lc 'black' t 'pred = meas', 1.15*x w l dt 2 lc 'gray' t '+-15%', 0.85*x w l dt 2 lc 'gray' notitle\n"
    )
    subprocess.run(["gnuplot"], input=gp, text=True, check=True)
    os.remove(dat)


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else "docs/data/plan_cpu"
    png = sys.argv[2] if len(sys.argv) > 2 else "docs/figures/planner_cpu_validation.png"
    rows = load(data)
    rates = fit(rows)
    out = table(rows, rates, fit(rows, col=3), gemm_table(data))
    with open(f"{data}/fit.md", "w") as f:
        f.write(out)
    sys.stdout.write(out)
    plot(rows, rates, png)


if __name__ == "__main__":
    main()
