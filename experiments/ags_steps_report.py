"""The steps study's report (steps to the target accuracy with warmup-stable-decay branches),
from its rows:

    python3 -m experiments.ags_steps_report --results results/ags-steps/STUDY [--out FILE] [--note TEXT]

--results reads the rows and options of a study folder (runs.jsonl, manifest.json), as
experiments.ags_steps_run writes them or experiments.convert_ags_steps_logs converted them. The
target is the selection's reference accuracy minus its tolerance; a seed's steps to the target
are T x (steps per epoch) of its shortest branch whose final test accuracy reaches it. Exit
status: 0 written; 1 the rows or the manifest cannot be read; 2 bad options."""
import argparse
import sys

from experiments import rows as rows_mod, testbed as tb
from experiments.stats import mean_ci

# the training set of Fashion-MNIST, less the validation split, gives the steps per epoch of a
# cell none of whose rows has them
TRAIN_IMAGES = 60000


class Steps:
    """A steps study: its options (a manifest's "options", with its model) and its runs (rows
    whose subset is null), by method, batch, seed and run ("trunk" or "T{T}")."""

    def __init__(self, model, options, rows):
        self.model = model
        self.methods = list(options["methods"])
        self.batches = [int(b) for b in options["batches"]]
        self.totals = [int(t) for t in options["totals"]]
        self.seeds = [str(s) for s in options["seeds"]]
        self.share = float(options["decay_share"])
        self.val = int(options["val_split"])
        ref = [ln.split() for ln in options["selection"] if ln.split()[:1] == ["reference"]]
        if not ref:
            raise ValueError("the selection has no 'reference BATCH MEAN WITHIN' line")
        self.ref_batch, self.ref_mean, self.within = ref[0][1], float(ref[0][2]), float(ref[0][3])
        self.target = self.ref_mean - self.within
        self.runs = {}
        for r in rows:
            if r.get("subset") is None:
                self.runs[(r["method"], int(r["batch"]), str(r["seed"]), r["run"])] = r

    def final_test(self, m, b, seed, t):
        """The final test accuracy of the branch of t epochs; None when it has none."""
        r = self.runs.get((m, b, str(seed), "T%d" % t))
        return r.get("test_accuracy") if r else None

    def steps_per_epoch(self, m, b):
        """The steps per epoch of the first of the cell's runs (seeds in order, the trunk, then
        the branches) that gives them; else the training set less the validation split over the batch."""
        for s in self.seeds:
            for run in ["trunk"] + ["T%d" % t for t in self.totals]:
                r = self.runs.get((m, b, s, run))
                if r and r.get("steps_per_epoch") is not None:
                    return int(r["steps_per_epoch"])
        return (TRAIN_IMAGES - self.val) // b

    def steps_to_target(self, m, b, seed):
        """(steps, T) of the shortest branch reaching the target, or None."""
        for t in sorted(self.totals):
            a = self.final_test(m, b, seed, t)
            if a is not None and a >= self.target:
                return t * self.steps_per_epoch(m, b), t
        return None


def ci(mean, half, n=None, f="%.4f"):
    if mean is None:
        return "-"
    return (f % mean) + ((" ± " + f) % half if half is not None else "")


def _header(st, header, p):
    p("# Steps to the target accuracy: %s, warmup-stable-decay branches" % st.model)
    p("")
    if header.get("converted"):
        p("Written by `experiments/ags_steps_report.py` from the rows in `%s` (one per run, converted from the"
          " study's tula-train logs); regenerate it with `make ags-report`. The study's command, with `--from-logs`"
          " on its logs:" % header["results"])
    else:
        p("Written by `experiments/ags_steps_report.py` from the rows in `%s` (one per run); regenerate it with the"
          " study's command and `--from-rows`. Command:" % header["results"])
    rows_mod.header_source(p, header)
    p("Each method runs at the learning-rate multiplier the tuned study chose for the batch (on validation"
      " accuracy). Per test seed, one trunk trains at that rate after the warmup, held constant, and saves its"
      " state at the branch points; a branch of T epochs continues from the state at k = T - D with a linear decay"
      " to zero over D = max(1, round(%g T)) epochs (Hägele et al. 2024, §3). Branches: T = %s epochs; the last"
      " %d training images are held out for validation (unused here)." % (st.share, ", ".join(map(str, st.totals)), st.val))
    p("")
    p("Target: tuned SGD at batch %s, mean test accuracy %.4f, minus %.2f: **%.4f**. A seed's steps to the target are"
      " those of its shortest branch whose final test accuracy reaches it." % (st.ref_batch, st.ref_mean, st.within, st.target))
    p("")


def _tables(st, p):
    """The accuracy and steps tables; {(method, batch): {seed: (steps, T) or None}}."""
    p("## Final test accuracy of the branches (mean ± 95 %% t half-width over seeds %s)" % ", ".join(st.seeds))
    p("")
    p("| method | batch | " + " | ".join("T=%d" % t for t in st.totals) + " |")
    p("| --- | ---: | " + " | ".join("---:" for _ in st.totals) + " |")
    for b in st.batches:
        for m in st.methods:
            row = []
            for t in st.totals:
                xs = [st.final_test(m, b, s, t) for s in st.seeds]
                got = [x for x in xs if x is not None]
                cell = ci(*mean_ci(got)) if got else "-"
                if got and len(got) < len(xs):
                    cell += " (%d of %d)" % (len(got), len(xs))
                row.append(cell)
            p("| %s | %d | %s |" % (m, b, " | ".join(row)))
    p("")
    p("## Steps to the target")
    p("")
    p("| method | batch | steps per epoch | per seed (steps, epochs) | mean steps | mean epochs |")
    p("| --- | ---: | ---: | --- | ---: | ---: |")
    reached = {}
    for b in st.batches:
        for m in st.methods:
            per = {s: st.steps_to_target(m, b, s) for s in st.seeds}
            reached[(m, b)] = per
            desc = ", ".join("seed %s: %s" % (s, "%d (%d)" % per[s] if per[s] else "not reached in %d epochs" % max(st.totals))
                             for s in st.seeds)
            full = all(per[s] for s in st.seeds)
            steps = ci(*mean_ci([per[s][0] for s in st.seeds]), f="%.0f") if full else "not every seed"
            epochs = ci(*mean_ci([per[s][1] for s in st.seeds]), f="%.1f") if full else "-"
            p("| %s | %d | %d | %s | %s | %s |" % (m, b, st.steps_per_epoch(m, b), desc, steps, epochs))
    p("")
    return reached


def _ratios(st, reached, p):
    variants = [m for m in st.methods if m == "ags" or m.startswith("ags-")]
    baselines = [m for m in st.methods if m not in variants]
    if "ags" not in st.methods or len(st.methods) < 2:
        return
    p("## AGS against the baselines: seed-paired ratio of steps (baseline / AGS)")
    p("")
    p("Above 1: AGS reaches the target in fewer steps. Seeds where either did not reach it are left out and named."
      " With AGS's variants among the methods (ags-sqrt, ags-first), each is compared with the baselines and with ags.")
    p("")
    for b in st.batches:
        for v in variants:
            for m in baselines + (["ags"] if v != "ags" else []):
                a, o = reached[(v, b)], reached[(m, b)]
                r = [o[s][0] / a[s][0] for s in st.seeds if a[s] and o[s]]
                left = [s for s in st.seeds if not (a[s] and o[s])]
                p("- batch %d, %s / %s: %s%s" % (b, m, v, ci(*mean_ci(r), f="%.2f") if r else "no seed where both reach it",
                  "" if not left else " (left out: seed%s %s)" % ("s" if len(left) > 1 else "", ", ".join(left))))
    p("")


def report(st, header):
    """The report of the Steps st; header: rows.read_study's."""
    w = []
    _header(st, header, w.append)
    reached = _tables(st, w.append)
    _ratios(st, reached, w.append)
    w.append("Not measured here: the steps of branch lengths between those listed (the resolution is the list of T),"
             " and other decay shares.")
    return "\n".join(w) + "\n"


def parser():
    p = argparse.ArgumentParser(prog="ags_steps_report", description=__doc__.split("\n\n")[0])
    p.add_argument("--results", required=True, help="a study's folder: runs.jsonl and manifest.json")
    p.add_argument("--out", help="the report's file (default: standard output)")
    p.add_argument("--note", default="", help="a paragraph under the report's header (default: the manifest's note)")
    return p


def load(results, note=""):
    """(steps, header): the Steps of a results folder and what the report's header says of its
    source. Errors: OSError, ValueError, KeyError, IndexError."""
    manifest, rows, header = rows_mod.read_study(results, note)
    return Steps(manifest["model"], manifest["options"], rows), header


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        st, header = load(args.results, args.note)
    except (OSError, ValueError, KeyError, IndexError) as e:
        print("tula: ags_steps_report: %s" % e, file=sys.stderr)
        return 1
    tb.write_text(args.out, report(st, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
