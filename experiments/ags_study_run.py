"""The tuned large-batch comparison of SGD, LARS, LAMB and AGS with tula-train:

    python3 -m experiments.ags_study_run [--model lenet5] [--batches "1024 2048 4096"]
        [--reference-batch 64] [--methods "sgd lars lamb ags"] [--lr-mults "0.5 1 2"]
        [--schedules "cosine wsd"] [--extend-edges 0] [--epochs 10] [--select-seed 1]
        [--seeds "2 3 4"] [--val-split 10000] [--jobs 2] [--results DIR] [--from-rows]
        [--print-selection] [--out FILE] [--trainer PATH] [--note TEXT] [-- extra tula-train options]

Every method gets the same tuning: at each global batch, a grid of learning-rate multipliers (of
the method's base --lr at --lr-base-batch 64, experiments/recipes.py) x schedules is trained on
the selection seed and the configuration with the best final validation accuracy is chosen (the
test set plays no part in it); the chosen configuration is then trained on fresh test seeds, and
the report (experiments/ags_report.py) compares those runs' test accuracy. When ags is among the
methods, the weak baseline (method "linear": SGD, uncapped linear scaling, x1, cosine) runs on
every seed. With --extend-edges K, a cell whose choice sits at the lowest or highest multiplier of
its grid gets the next multiplier on that side (the grid's ratio continued) with every schedule,
up to K times.

--results DIR (default results/ags-study/MODEL): the study's rows (runs.jsonl, a row per run,
from tula-train's --summary file) and manifest.json; a run whose row is complete (a summary or
the divergence message) is not run again, so an interrupted study resumes where it stopped.
--from-rows: trains nothing and writes the report from DIR's rows (give it the study's grid
options); --print-selection: like --from-rows, but prints each tuned cell's choice ("chosen
METHOD BATCH MULT SCHEDULE", "-" for none) and "reference BATCH MEAN WITHIN", the input of
experiments.ags_steps_run; --out FILE: the report (default DIR/report.md); --jobs N: trainings at
a time; --note TEXT: a paragraph the report carries under its header (kept in the manifest).
Every run: --model --data fashion-mnist --epochs --batch-size --seed --val-split --threads 1
--no-db --quiet, the method's recipe, --lr, --schedule, the extra options and --summary.
Stopping: SIGTERM or SIGINT stops the runs in flight; they leave no row and are trained again by
the next invocation. Environment: B (build directory, default build) locates tula-train when
--trainer is not given. Exit status: 0 report written; 1 report written but some run failed for
another reason than divergence (its row keeps its output), or the rows cannot be read; 2 bad
options; 128 + the signal's number when stopped."""
import os
import sys

from experiments import ags_report, rows as rows_mod, runner, study_cli as cli
from experiments.ags_report_text import report
from experiments.ags_study import Study
from experiments.convert_ags_logs import fmt_mult
from experiments.recipes import WEAK, train_args

NAME = "ags-study"
KEY = ("subset", "method", "batch", "lr_mult", "schedule", "seed")
OWN = ("--model", "--data", "--epochs", "--batch-size", "--seed", "--val-split", "--optimizer", "--lr", "--lr-base-batch",
       "--lr-scaling", "--lr-max", "--schedule", "--threads", "--no-db", "--quiet")


def parser():
    p = cli.Parser("ags_study_run", __doc__)
    p.add_argument("--model", default="lenet5")
    p.add_argument("--batches", default="1024 2048 4096")
    p.add_argument("--reference-batch", default="64")
    p.add_argument("--methods", default="sgd lars lamb ags")
    p.add_argument("--lr-mults", default="0.5 1 2")
    p.add_argument("--schedules", default="cosine wsd")
    p.add_argument("--extend-edges", default="0")
    p.add_argument("--epochs", default="10")
    p.add_argument("--select-seed", default="1")
    p.add_argument("--print-selection", action="store_true", help="train nothing; print the choices")
    p.add_common("ags-study")
    return p


def mults(text):
    out = []
    for x in cli.words("--lr-mults", text):
        try:
            v = float(x)
        except ValueError:
            v = 0
        if not (v > 0 and v != float("inf")) or x.lower().startswith(("n", "i", "-", "+")):
            raise cli.Usage("--lr-mults: '%s' is not a positive number" % x)
        out.append(fmt_mult(v))
    cli.words("--lr-mults", " ".join(out))
    return out


def options(a):
    """The study's grid options (a manifest's "options") from the parsed arguments. Errors: cli.Usage."""
    cli.model(a.model)
    o = {"batches": cli.integers("--batches", a.batches), "reference_batch": cli.integer("--reference-batch", a.reference_batch),
         "methods": cli.methods(a.methods), "lr_mults": mults(a.lr_mults), "schedules": cli.words("--schedules", a.schedules)}
    for s in o["schedules"]:
        if s not in ("cosine", "wsd"):
            raise cli.Usage("--schedules: unknown schedule '%s' (valid: cosine, wsd)" % s)
    o["extend_edges"] = cli.integer("--extend-edges", a.extend_edges, 0)
    if o["extend_edges"] > 4:
        raise cli.Usage("--extend-edges: '%s' is not an integer from 0 to 4" % a.extend_edges)
    o["epochs"] = cli.integer("--epochs", a.epochs)
    o["select_seed"] = cli.integer("--select-seed", a.select_seed, 0)
    o["seeds"] = cli.integers("--seeds", a.seeds, 0)
    if o["select_seed"] in o["seeds"]:
        raise cli.Usage("--seeds: %d is the selection seed; the test seeds must be fresh" % o["select_seed"])
    if not a.val_split.isdigit() or int(a.val_split) < 1:
        raise cli.Usage("--val-split: '%s' is not a positive integer (the selection needs a validation set)" % a.val_split)
    o["val_split"] = int(a.val_split)
    cli.check_extra(a.extra, OWN, "study")
    o["extra"] = list(a.extra)
    return o


def make_run(a, o, trainer, m, b, mult, sched, seed):
    """The Run of one configuration on one seed."""
    x = float(mult)
    args = [trainer, "--model", a.model, "--data", "fashion-mnist", "--epochs", str(o["epochs"]), "--batch-size", str(b),
            "--seed", str(seed), "--val-split", str(o["val_split"]), "--threads", "1", "--no-db", "--quiet"]
    args += train_args(m, x) + ["--schedule", sched] + o["extra"]
    key = {"subset": None, "method": m, "batch": b, "lr_mult": int(x) if x.is_integer() else x, "schedule": sched, "seed": seed}
    return runner.Run(key, args)


def train(a, o, results, trainer, say):
    """The study's three phases: the grids and the weak baseline, the grids' edge extensions,
    the choices on the test seeds. Returns the pool (its failed count). Errors: runner.Stopped."""
    table = runner.Table(os.path.join(results, "runs.jsonl"), KEY)
    pool = runner.Pool(table, int(a.jobs), cli.base_row(os.path.basename(os.path.normpath(results)), trainer), say)

    def study():
        return Study(a.model, o, table.rows)
    st = study()
    sel = o["select_seed"]
    phase1 = [make_run(a, o, trainer, m, b, x, s, sel) for (m, b) in st.cells() for x in st.mults for s in st.scheds]
    if "ags" in o["methods"]:
        phase1 += [make_run(a, o, trainer, WEAK, b, "1", "cosine", seed) for b in o["batches"] for seed in [sel] + o["seeds"]]
    todo = pool.todo(phase1)
    if len(todo) < len(phase1):
        say("%d selection or weak-baseline runs already have a complete row in %s; not run again" % (len(phase1) - len(todo), results))
    pool.total = len(todo) + len(st.cells()) * len(o["seeds"])
    pool.run_all(todo)
    for rnd in range(1, o["extend_edges"] + 1):
        ext = pool.todo([make_run(a, o, trainer, *r) for r in study().missing_selection_runs()])
        if not ext:
            break
        say("round %d of the edge extension: %d selection runs" % (rnd, len(ext)))
        pool.total += len(ext)
        pool.run_all(ext)
    st = study()
    phase2 = []
    for (m, b) in st.cells():
        c = st.select(m, b)
        if c is None:
            say("no configuration of %s at batch %d has a validation accuracy; no test runs" % (m, b))
            continue
        phase2 += [make_run(a, o, trainer, m, b, c[0], c[1], seed) for seed in o["seeds"]]
    todo = pool.todo(phase2)
    pool.total = pool.done + len(todo)
    if len(todo) < len(phase2):
        say("%d test runs already have a complete row in %s (an earlier study, or the weak baseline's run); not run again"
            % (len(phase2) - len(todo), results))
    pool.run_all(todo)
    return pool


def run(argv, say):
    a = parser().parse_args(argv)
    o = options(a)
    cli.integer("--jobs", a.jobs)
    results, out, trainer = cli.start(a, argv, "experiments.ags_study_run", "ags-study", o, a.from_rows or a.print_selection)
    failed = train(a, o, results, trainer, say).failed if trainer else 0
    if a.print_selection:
        st = Study(a.model, o, rows_mod.read_rows(os.path.join(results, "runs.jsonl")))
        print("\n".join(ags_report.selection_lines(st, "print-selection")))
        return 0
    return cli.finish(results, out, a.note, lambda rows, header: report(Study(a.model, o, rows), header), say, failed,
                      "runs failed for another reason than divergence")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    return cli.main_of(NAME, lambda say: run(argv, say))


if __name__ == "__main__":
    sys.exit(main())
