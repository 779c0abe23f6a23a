"""Steps to the target accuracy of the tuned large-batch study's chosen configurations, measured
with warmup-stable-decay branches (Hägele et al. 2024, §3):

    python3 -m experiments.ags_steps_run --selection FILE [--model lenet5] [--batches "1024 4096"]
        [--methods "ags lamb"] [--totals "3 5 10 15 20 25 30 40"] [--decay-share 0.2]
        [--seeds "2 3 4"] [--val-split 10000] [--jobs 2] [--results DIR] [--work DIR] [--from-rows]
        [--out FILE] [--trainer PATH] [--note TEXT] [-- extra tula-train options]

Per method, global batch and test seed, one long run at a constant rate after warmup (the trunk)
saves its state at the end of every branch point k (tula-train --save-epochs), and from each of
them a short linear decay to zero of D epochs is branched off (--branch-from, --schedule wsd
--decay-epochs D), so that one trunk gives the accuracy of runs of T = k + D epochs for every T
of the list. The target is the study's: tuned SGD's mean test accuracy at the reference batch
minus its tolerance. The report (experiments/ags_steps_report.py) gives each method's steps to
the target per batch, each T's mean test accuracy, and the seed-paired ratios.

--selection FILE: the study's choices, as `python3 -m experiments.ags_study_run ...
--print-selection` prints them; each method runs at its chosen rate multiplier for the batch.
--totals: the branches' lengths T in epochs; each decays over D = max(1, round(share x T)) epochs
(--decay-share) from the trunk's state at k = T - D, and the trunk runs max(k) epochs.
--results DIR (default results/ags-steps/MODEL): the rows (runs.jsonl: run "trunk" or "T{T}")
and manifest.json; a run whose row is complete is not run again (a trunk is run again when a
branch still needs a state it no longer has); --work DIR (default build/ags-steps-work/MODEL):
the saved states, removed once a trunk's branches are done; --from-rows: trains nothing, writes
the report; --out FILE (default DIR/report.md); --note TEXT: a paragraph under the report's header.
Every run: --model --data fashion-mnist --batch-size --seed --val-split --threads 1 --no-db, the
method's recipe (experiments/recipes.py), the extra options and --summary. Stopping: SIGTERM or
SIGINT stops the chains in flight and their trainings. Environment: B (build directory, default
build) locates tula-train when --trainer is not given. Exit status: 0 report written; 1 report
written but some run failed; 2 bad options; 128 + the signal's number when stopped."""
import os
import sys

from experiments import runner, study_cli as cli
from experiments.ags_steps_report import Steps, report
from experiments.recipes import train_args

NAME = "ags-steps"
KEY = ("subset", "method", "batch", "seed", "run")
OWN = ("--model", "--data", "--epochs", "--batch-size", "--seed", "--val-split", "--optimizer", "--lr", "--lr-base-batch",
       "--lr-scaling", "--lr-max", "--schedule", "--decay-epochs", "--decay-fraction", "--save-epochs", "--branch-from",
       "--checkpoint", "--threads", "--no-db")


def parser():
    p = cli.Parser("ags_steps_run", __doc__)
    p.add_argument("--selection", help="the study's choices (ags_study_run --print-selection)")
    p.add_argument("--model", default="lenet5")
    p.add_argument("--batches", default="1024 4096")
    p.add_argument("--methods", default="ags lamb")
    p.add_argument("--totals", default="3 5 10 15 20 25 30 40")
    p.add_argument("--decay-share", default="0.2")
    p.add_argument("--work", help="the saved states (default build/ags-steps-work/MODEL)")
    p.add_common("ags-steps")
    return p


def decay(share, t):
    """The decay epochs of the branch of t epochs."""
    return max(1, int(share * t + 0.5))


def chosen(selection, m, b):
    """The chosen multiplier of a cell in the selection's lines, or None."""
    for line in selection:
        w = line.split()
        if len(w) == 5 and w[0] == "chosen" and w[1] == m and w[2] == str(b) and w[3] != "-":
            return w[3]
    return None


def options(a):
    """The study's options (a manifest's "options"). Errors: cli.Usage."""
    if not a.selection:
        raise cli.Usage("--selection FILE is required (write it with python3 -m experiments.ags_study_run ... --print-selection)")
    try:
        with open(a.selection, encoding="utf-8") as f:
            selection = f.read().splitlines()
    except OSError:
        raise cli.Usage("--selection: cannot read '%s'" % a.selection)
    cli.model(a.model)
    o = {"selection": selection, "batches": cli.integers("--batches", a.batches), "methods": cli.methods(a.methods),
         "totals": cli.integers("--totals", a.totals)}
    try:
        share = float(a.decay_share)
    except ValueError:
        share = 0
    if not 0 < share < 1:
        raise cli.Usage("--decay-share: '%s' is not a number in (0, 1)" % a.decay_share)
    o.update(decay_share=share, seeds=cli.integers("--seeds", a.seeds, 0), val_split=cli.integer("--val-split", a.val_split))
    ref = [ln.split() for ln in selection if ln.split()[:1] == ["reference"]]
    if not ref or len(ref[0]) < 4 or not ref[0][2].replace(".", "", 1).isdigit():
        raise cli.Usage("--selection: no reference accuracy in '%s' (a 'reference BATCH MEAN WITHIN' line)" % a.selection)
    for m in o["methods"]:
        for b in o["batches"]:
            if chosen(selection, m, b) is None:
                raise cli.Usage("--selection: no chosen configuration of %s at batch %d in '%s'" % (m, b, a.selection))
    for t in o["totals"]:
        if t - decay(share, t) < 1:
            raise cli.Usage("--totals: %d epochs leave no constant-rate epoch before a decay of %d" % (t, decay(share, t)))
    cli.check_extra(a.extra, OWN, "runner")
    o["extra"] = list(a.extra)
    return o


def make_chain(a, o, trainer, work, table, m, b, seed):
    """The chain of a method, batch and seed: the trunk when a branch needs a state it does not
    have (or the trunk has no complete row), then the branches; its states are removed after it."""
    x = float(chosen(o["selection"], m, b))
    mult = int(x) if x.is_integer() else x
    base = [trainer, "--model", a.model, "--data", "fashion-mnist", "--batch-size", str(b), "--seed", str(seed),
            "--val-split", str(o["val_split"]), "--threads", "1", "--no-db"] + train_args(m, x) + o["extra"]
    ck = os.path.join(work, "%s-%d-seed%d.ckpt" % (m, b, seed))
    points = [t - decay(o["decay_share"], t) for t in o["totals"]]

    def key(run):
        return {"subset": None, "method": m, "batch": b, "seed": seed, "run": run}

    branches = []
    for t, k in zip(o["totals"], points):
        d = decay(o["decay_share"], t)
        state = "%s.e%d" % (ck, k)
        branches.append(runner.Run(key("T%d" % t), base + ["--epochs", str(t), "--schedule", "wsd", "--decay-epochs", str(d),
                                                           "--branch-from", state],
                                   extra={"lr_mult": mult, "schedule": "wsd", "run": "T%d" % t, "epochs": t, "decay_epochs": d},
                                   blocked=_blocked(state, k)))
    need = any(not runner.complete(table.find(r) or {}) and not os.path.exists(_state(r)) for r in branches)
    kmax = max(points)
    trunk = runner.Run(key("trunk"), base + ["--epochs", str(kmax), "--schedule", "constant", "--checkpoint", ck,
                                             "--save-epochs", ",".join(map(str, points))],
                       extra={"lr_mult": mult, "schedule": "constant", "run": "trunk", "epochs": kmax}, force=need)

    def after():
        for f in [ck] + ["%s.e%d" % (ck, k) for k in points]:
            if os.path.exists(f):
                os.remove(f)
    return runner.Chain([trunk] + branches, after)


def _state(run):
    return runner.option(run.args, "--branch-from")


def _blocked(state, k):
    def why():
        if os.path.exists(state):
            return None
        return "tula: ags-steps: the trunk saved no state at epoch %d (it diverged or failed; see its row)" % k
    return why


def run(argv, say):
    a = parser().parse_args(argv)
    o = options(a)
    jobs = cli.integer("--jobs", a.jobs)
    results, out, trainer = cli.start(a, argv, "experiments.ags_steps_run", "ags-steps", o, a.from_rows)
    failed = 0
    if trainer:
        work = a.work or os.path.join("build", "ags-steps-work", a.model)
        os.makedirs(work, exist_ok=True)
        table = runner.Table(os.path.join(results, "runs.jsonl"), KEY)
        pool = runner.Pool(table, jobs, cli.base_row(os.path.basename(os.path.normpath(results)), trainer), say)
        chains = [make_chain(a, o, trainer, work, table, m, b, s) for b in o["batches"] for m in o["methods"] for s in o["seeds"]]
        say("trunks of %d epochs saving at %s; %d chains, %d at a time"
            % (chains[0].runs[0].extra["epochs"], ",".join(str(t - decay(o["decay_share"], t)) for t in o["totals"]),
               len(chains), jobs))
        pool.run_chains(chains)
        failed = pool.failed
    return cli.finish(results, out, a.note, lambda rows, header: report(Steps(a.model, o, rows), header), say, failed,
                      "runs failed")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    return cli.main_of(NAME, lambda say: run(argv, say))


if __name__ == "__main__":
    sys.exit(main())
