"""The large-batch study's analysis on its rows: which runs there are, each cell's grid (with
its edge extensions) and choice on validation accuracy, and the test runs' summaries. The report
(ags_report.py) and its runner (ags_study_run.py) use it."""
import functools
import math

from experiments.convert_ags_logs import fmt_mult
from experiments.stats import mean_ci

# a test accuracy below this counts as diverged (chance level is 0.1)
DIVERGED_BELOW = 0.2
# the critical batch's tolerance: within this of the target
WITHIN = 0.01
# the large batches: the differences of AGS from a baseline are also averaged over the batches
# from this one up, with an interval over the seeds (each seed's mean over those batches)
LARGE_FROM = 1024


class Study:
    """A study's grid options (a manifest's "options", with its model) and its runs (rows whose
    subset is null)."""

    def __init__(self, model, options, rows):
        self.model = model
        self.epochs = options["epochs"]
        self.val_split = options["val_split"]
        self.methods = list(options["methods"])
        self.scheds = list(options["schedules"])
        # ascending, so ties go to the lower rate
        self.mults = sorted((fmt_mult(float(x)) for x in options["lr_mults"]), key=float)
        self.extend = int(options["extend_edges"])
        self.batches = [int(b) for b in options["batches"]]
        self.ref = int(options["reference_batch"])
        self.sel = str(options["select_seed"])
        self.seeds = [str(s) for s in options["seeds"]]
        self.runs = {}
        for r in rows:
            if r.get("subset") is None:
                key = (r["method"], int(r["batch"]), fmt_mult(float(r["lr_mult"])), r["schedule"], str(r["seed"]))
                self.runs[key] = r
        self.grid_of = functools.lru_cache(maxsize=None)(self._grid_of)

    def read(self, m, b, mult, sched, seed):
        """The run's outcome: None when it has no row, else a dict with test and val accuracy
        (None when absent or not finite) and diverged."""
        row = self.runs.get((m, b, mult, sched, str(seed)))
        if row is None:
            return None
        r = {"test": _finite(row.get("test_accuracy")), "val": _finite(row.get("val_accuracy")), "done": bool(row.get("done"))}
        r["diverged"] = not r["done"] or r["test"] is None or r["test"] < DIVERGED_BELOW
        return r

    def command_of(self, m, b, config, seed):
        """The tula-train command of a run."""
        row = self.runs.get((m, b, config[0], config[1], str(seed)))
        name = "%s %d x%s %s seed %s" % (m, b, config[0], config[1], seed)
        if row is None:
            return "(no row of %s)" % name
        return row["command"] if row.get("command") is not None else "(no command in the row of %s)" % name

    def cells(self):
        """(method, batch) pairs that are tuned: every method at every batch, and sgd at the reference batch."""
        out = [("sgd", self.ref)] if ("sgd", self.ref) not in [(m, b) for m in self.methods for b in self.batches] else []
        return out + [(m, b) for m in self.methods for b in self.batches]

    def best_of(self, m, b, grid):
        """The (mult, schedule, val) with the best validation accuracy on the selection seed among
        grid's multipliers and every schedule, or None; ties go to the first in grid order."""
        best = None
        for mult in grid:
            for sched in self.scheds:
                r = self.read(m, b, mult, sched, self.sel)
                if r and r["val"] is not None and (best is None or r["val"] > best[2]):
                    best = (mult, sched, r["val"])
        return best

    def _grid_of(self, m, b):
        """The cell's multipliers, ascending: the grid's, then, up to extend times, while the best
        choice so far is the lowest (highest) multiplier, the next one below (above) it, whose
        ratio to it is that of the grid's two lowest (highest). A multiplier added whose runs have
        no row yet leaves the choice where it was, so the extension stops there until they are run."""
        grid = [float(x) for x in self.mults]
        for _ in range(self.extend):
            best = self.best_of(m, b, [fmt_mult(x) for x in grid])
            if best is None or len(grid) < 2:
                break
            x = float(best[0])
            if x == grid[0]:
                grid.insert(0, grid[0] * grid[0] / grid[1])
            elif x == grid[-1]:
                grid.append(grid[-1] * grid[-1] / grid[-2])
            else:
                break
        return tuple(fmt_mult(x) for x in grid)

    def select(self, m, b):
        """The (mult, schedule, val) chosen for the cell on its grid (grid_of), or None."""
        return self.best_of(m, b, self.grid_of(m, b))

    def at_edge(self, m, b, chosen):
        """The choice is the lowest or highest multiplier of its cell's grid: the best rate may lie outside."""
        grid = self.grid_of(m, b)
        return len(grid) > 1 and chosen[0] in (grid[0], grid[-1])

    def test_runs(self, m, b, chosen, seeds):
        return {s: self.read(m, b, chosen[0], chosen[1], s) for s in seeds} if chosen else {s: None for s in seeds}

    def missing_selection_runs(self):
        """The selection runs of the cells' grids (with their extensions so far) that have no row,
        as (method, batch, mult, schedule, seed)."""
        return [(c[0], c[1], x, s, self.sel) for c in self.cells() for x in self.grid_of(*c) for s in self.scheds
                if self.read(c[0], c[1], x, s, self.sel) is None]


def _finite(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def summary(runs):
    """mean, half-width, n with an accuracy, diverged seeds, missing seeds."""
    accs = [r["test"] for r in runs.values() if r and r["test"] is not None and math.isfinite(r["test"])]
    mean, half, n = mean_ci(accs)
    div = [s for s, r in runs.items() if r and r["diverged"]]
    missing = [s for s, r in runs.items() if r is None]
    return mean, half, n, div, missing


def paired_diffs(a, b):
    """{seed: a - b} of the test accuracies, over the seeds where both have one."""
    return {s: a[s]["test"] - b[s]["test"] for s in a
            if a[s] and b.get(s) and a[s]["test"] is not None and b[s]["test"] is not None}


def paired(a, b):
    """Seed-paired differences a - b: mean, 95 % t half-width, n."""
    return mean_ci(list(paired_diffs(a, b).values()))


def fmt_ci(mean, half, n, signed=False):
    if mean is None:
        return "not measured"
    f = "%+.4f" if signed else "%.4f"
    return (f % mean) + (" ± %.4f" % half if half is not None else " (one seed, no interval)")
