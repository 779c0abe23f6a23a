"""Which form of the step on several GPU nodes holds on measured traces: a study for the fitted
step model, on the protocol of bench/bench-traces (the same data, the same split, the same naive
anchor), without Tula.

Data: bench/data/sia-step-traces.json, read by bench/bench-traces' own loader (one row per
entry and placement K nodes x R GPUs per node at local batch b; step and exposed sync in seconds).
Per entry (one model's measurement session on one GPU type) the seen rows are the placements on
at most 2 nodes, the predicted ones those on 3 or more (a GPU type of 2 nodes: seen 1 node and
2 x 1, predicted 2 x R), exactly as bench-traces splits them.

The forms, each built from the seen rows of its entry alone (values at b read from the seen
local batches: linear in log b between them, the last two's line beyond the largest, the
smallest's value below it):

  naive        step(1x1, b) + sync(2x1, b) 2 (K-1)/K                         (bench-traces' anchor)
  parts-PSI    step(1xR, b) + a_R(b) PSI(K), a_R(b) = sync(2xR, b) - sync(1xR, b), at least 0
  steps-PSI    step(1xR, b) + a_R(b) PSI(K), a_R(b) = step(2xR, b) - step(1xR, b), at least 0

step(1xR, b) is the measured step of R GPUs on one node (the compute of R ranks sharing a node
and the within-node exchange, as measured); a_R(b) is what the second node adds, from the
exposed syncs (parts) or from the steps alone (steps: what finished runs give). Where 2 x R is
not seen (GPU types of 2 nodes) a_R is a_1, the second node's cost at one GPU per node. PSI(K)
scales it from 2 nodes to K, with PSI(2) = 1:

  flat  1                      (the across-node exchange hidden behind the within-node one)
  ring  2 (K-1)/K              (ring allreduce, bandwidth term; Thakur et al. 2005, sec. 4.5)
  log   log2 K                 (tree / recursive halving-doubling latency)
  sqrt  sqrt(K-1)
  lin   K-1                    (ring allreduce, latency term)

The seen rows hold 1 and 2 nodes only, so they cannot choose PSI by leaving placements out;
this study is the public traces' word on it, which the held-back traces check.

Usage: python3 -m experiments.step_forms [--data FILE] [--out FILE]
(default data bench/data/sia-step-traces.json; default out results/step-forms/report.md;
'-' prints it)."""
import argparse
import collections
import importlib.machinery
import importlib.util
import math
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PSI = {"flat": lambda K: 1.0, "ring": lambda K: 2.0 * (K - 1) / K, "log": lambda K: math.log2(K),
       "sqrt": lambda K: math.sqrt(K - 1), "lin": lambda K: K - 1.0}


def bench_traces():
    """bench/bench-traces as a module (its loader and split)."""
    path = os.path.join(REPO, "bench", "bench-traces")
    loader = importlib.machinery.SourceFileLoader("bench_traces", path)
    spec = importlib.util.spec_from_loader("bench_traces", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def at(knots, b):
    """knots {b: value} read at b: linear in log b between knots, the last two's line in b beyond
    the largest, the smallest's value below it; None for no knots."""
    if not knots:
        return None
    ks = sorted(knots)
    if b <= ks[0]:
        return knots[ks[0]]
    if b >= ks[-1]:
        if len(ks) == 1:
            return knots[ks[0]]
        b1, b2 = ks[-2], ks[-1]
        return knots[b2] + (knots[b2] - knots[b1]) / (b2 - b1) * (b - b2)
    for lo, hi in zip(ks, ks[1:]):
        if lo <= b <= hi:
            w = math.log(b / lo) / math.log(hi / lo)
            return knots[lo] * (1 - w) + knots[hi] * w
    return None


def form(seen, source, psi):
    """f(K, R, b) of the form source-psi ('parts' or 'steps'), built from the seen rows."""
    step, sync = collections.defaultdict(dict), collections.defaultdict(dict)
    for r in seen:
        step[r["K"], r["R"]][r["b"]] = r["step"]
        sync[r["K"], r["R"]][r["b"]] = r["sync"]
    cost = sync if source == "parts" else step

    def second_node(R, b):
        if (2, R) in cost and (1, R) in cost:
            return max(0.0, at(cost[2, R], b) - at(cost[1, R], b))
        return max(0.0, at(cost[2, 1], b) - at(cost[1, 1], b))

    def f(K, R, b):
        base = at(step[1, R], b) if (1, R) in step else None
        if base is None or (2, 1) not in cost:
            return None
        return base + second_node(R, b) * PSI[psi](K)
    return f


def naive(seen):
    step1 = {r["b"]: r["step"] for r in seen if (r["K"], r["R"]) == (1, 1)}
    sync2 = {r["b"]: r["sync"] for r in seen if (r["K"], r["R"]) == (2, 1)}

    def f(K, R, b):
        s, c = at(step1, b), at(sync2, b)
        return None if s is None or c is None else s + c * 2.0 * (K - 1) / K
    return f


def study(types, split):
    """{form name: {GPU label or 'all': [relative errors]}}, and the predicted rows' count."""
    names = ["naive"] + ["%s-%s" % (s, p) for s in ("parts", "steps") for p in PSI]
    errors = {n: collections.defaultdict(list) for n in names}
    count = 0
    for _, t in sorted(types.items()):
        for _, e in sorted(t["entries"].items()):
            seen = [r for r in e["rows"] if split(t["nodes"], r) == "seen"]
            predicted = [r for r in e["rows"] if split(t["nodes"], r) == "predicted"]
            if not predicted:
                continue
            count += len(predicted)
            fs = {"naive": naive(seen)}
            for n in names[1:]:
                s, p = n.split("-")
                fs[n] = form(seen, s, p)
            for n, f in fs.items():
                for r in predicted:
                    p = f(r["K"], r["R"], r["b"])
                    err = float("inf") if p is None else abs(p - r["step"]) / r["step"]
                    errors[n][t["label"]].append(err)
                    errors[n]["all"].append(err)
    return errors, count


def report(errors, count, data):
    labels = sorted({k for v in errors.values() for k in v if k != "all"}) + ["all"]
    out = ["# Step forms on measured multi-GPU traces (experiments/step_forms.py)", "",
           "`python3 -m experiments.step_forms` on %s: %d predicted placements, each form built from "
           "its entry's seen rows (bench/bench-traces' split). Relative error of the step, median / "
           "maximum; the forms are defined in the module's docstring." % (os.path.relpath(data, REPO), count), "",
           "| form | " + " | ".join(labels) + " |", "| --- |" + " ---: |" * len(labels)]
    for n, by in errors.items():
        cells = []
        for lab in labels:
            v = sorted(by[lab])
            cells.append("%.1f %% / %.1f %%" % (100 * statistics.median(v), 100 * v[-1]))
        out.append("| %s | %s |" % (n, " | ".join(cells)))
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m experiments.step_forms", description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(REPO, "bench", "data", "sia-step-traces.json"))
    ap.add_argument("--out", default=os.path.join(REPO, "results", "step-forms", "report.md"))
    a = ap.parse_args(argv)
    bt = bench_traces()
    try:
        types = bt.load(a.data)
    except bt.BenchError as e:
        print("tula: step_forms: %s" % e, file=sys.stderr)
        return 1
    errors, count = study(types, bt.split)
    text = report(errors, count, os.path.abspath(a.data))
    if a.out == "-":
        sys.stdout.write(text)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text)
        print("tula: step_forms: wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
