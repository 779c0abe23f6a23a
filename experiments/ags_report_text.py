"""The text of the large-batch study's report (Markdown), from a Study (ags_study.py): the
header, the selection table, the test accuracies, the critical batches, AGS's differences from
the baselines, and what is not measured."""
from experiments import rows as rows_mod
from experiments.recipes import base_lr_text, recipes_text
from experiments.ags_study import DIVERGED_BELOW, LARGE_FROM, WITHIN, fmt_ci, paired, paired_diffs, summary
from experiments.stats import mean_ci


def report(st, header):
    """The report of the Study st; header: rows.read_study's."""
    w = []
    p = w.append
    chosen = {c: st.select(*c) for c in st.cells()}
    _header(p, st, header, chosen)
    _selection(p, st, chosen)
    res = {c: st.test_runs(c[0], c[1], chosen[c], st.seeds) for c in st.cells()}
    _test_table(p, st, chosen, res)
    _critical(p, st, chosen, res)
    _differences(p, st, chosen, res)
    _not_measured(p, st, chosen, res)
    return "\n".join(w) + "\n"


def _header(p, st, header, chosen):
    p("# Large-batch optimizer study: %s on Fashion-MNIST" % st.model)
    p("")
    if header.get("converted"):
        p("Written by `experiments/ags_report.py` from the rows in `%s` (one per run, converted from the study's" % header["results"])
        p("tula-train logs); regenerate it with `make ags-report`. The study's command, with `--from-logs` on its logs:")
    else:
        p("Written by `experiments/ags_report.py` from the rows in `%s` (one per run); regenerate it with the" % header["results"])
        p("study's command and `--from-rows`. Command:")
    rows_mod.header_source(p, header)
    p("- model `%s`, data fashion-mnist, epochs per run: %s; validation set: the last %s training examples" % (st.model, st.epochs, st.val_split))
    p("- methods: %s; global batches: %s; reference batch (SGD only): %d" % (", ".join(st.methods), ", ".join(map(str, st.batches)), st.ref))
    p("- grid per (method, batch): learning-rate multipliers %s of the method's base rate (`--lr` at `--lr-base-batch 64`:"
      " %s) x schedules %s%s" % (", ".join("x" + x for x in st.mults), base_lr_text(), ", ".join(st.scheds),
      "" if not st.extend else "; a row whose choice is the lowest (highest) multiplier of its grid gets the next one below"
      " (above) it with every schedule, up to %d time%s, by the same rule for every method" % (st.extend, "" if st.extend == 1 else "s")))
    if st.extend:
        runs = {m: sum(len(st.grid_of(c[0], c[1])) * len(st.scheds) for c in st.cells() if c[0] == m and c[1] in st.batches)
                for m in st.methods}
        p("- selection runs per method over the batches %s (the grid and its extensions): %s" % (
          ", ".join(map(str, st.batches)), ", ".join("%s %d" % (m, runs[m]) for m in st.methods)))
    p("- selection seed: %s (validation accuracy only); test seeds: %s" % (st.sel, ", ".join(st.seeds)))
    p("- " + recipes_text())
    p("- every run: `--data fashion-mnist --threads 1 --no-db --quiet` and the study's extra options; the reference"
      " run's command, from its row:")
    p("")
    p("    " + st.command_of("sgd", st.ref, (chosen[("sgd", st.ref)] or (st.mults[0], st.scheds[0]))[:2], st.sel))
    p("")


def _selection(p, st, chosen):
    p("## Selection (final validation accuracy, seed %s)" % st.sel)
    p("")
    p("Bold: the chosen configuration of the row. failed: the run ended without a done line (diverged or"
      " crashed); missing: no row; -: not in the row's grid. A choice at the edge of its row's grid is marked"
      " *edge*: the best rate may lie outside the grid.")
    p("")
    all_mults = sorted({x for c in st.cells() for x in st.grid_of(*c)}, key=float)
    grid = [(x, s) for x in all_mults for s in st.scheds]
    p("| method | batch | " + " | ".join("x%s %s" % g for g in grid) + " | chosen |")
    p("| --- | ---: | " + " | ".join("---:" for _ in grid) + " | --- |")
    for (m, b) in st.cells():
        row = []
        mine = st.grid_of(m, b)
        c = chosen[(m, b)]
        for (x, s) in grid:
            r = st.read(m, b, x, s, st.sel)
            v = "missing" if r is None else ("failed" if r["val"] is None else "%.4f" % r["val"])
            v = v if x in mine else "-"
            row.append("**%s**" % v if c and (c[0], c[1]) == (x, s) else v)
        if c:
            ch = "x%s %s%s" % (c[0], c[1], " *edge*" if st.at_edge(m, b, c) else "")
        else:
            ch = "none (no validation accuracy)"
        p("| %s | %d%s | %s | %s |" % (m, b, " (reference)" if (m, b) == ("sgd", st.ref) else "", " | ".join(row), ch))
    p("")


def _test_table(p, st, chosen, res):
    p("## Test accuracy of the chosen configurations (seeds %s)" % ", ".join(st.seeds))
    p("")
    p("Mean over the seeds with a test accuracy ± the half-width of its 95 %% t-interval (n-1 degrees of"
      " freedom). A seed is counted as diverged when its test accuracy is below %.1f (the run diverged or never"
      " left chance level, 0.1), or its run has no done line or a NaN;"
      " such a seed without a number is left out of the mean and counted under diverged only." % DIVERGED_BELOW)
    p("")
    p("| batch | " + " | ".join(st.methods) + " |")
    p("| ---: | " + " | ".join("---:" for _ in st.methods) + " |")

    def cell_text(c):
        if not chosen.get(c):
            return "no selection"
        mean, half, n, div, missing = summary(res[c])
        t = fmt_ci(mean, half, n)
        if div:
            t += "; diverged: seed %s" % ", ".join(div)
        if missing:
            t += "; missing: seed %s" % ", ".join(missing)
        return t
    if ("sgd", st.ref) not in [(m, b) for m in st.methods for b in st.batches]:
        p("| %d (reference) | " % st.ref + " | ".join(cell_text(("sgd", st.ref)) if m == "sgd" else "-" for m in st.methods) + " |")
    for b in st.batches:
        p("| %d | " % b + " | ".join(cell_text((m, b)) for m in st.methods) + " |")
    p("")


def _critical(p, st, chosen, res):
    p("## Critical batch")
    p("")
    ref = ("sgd", st.ref)
    ref_mean, ref_half, ref_n, ref_div, ref_missing = summary(res[ref]) if chosen[ref] else (None,) * 3 + ([], st.seeds)
    if ref_mean is None:
        p("Not measured: tuned SGD at the reference batch %d has no test accuracy." % st.ref)
        p("")
        return
    p("Target: tuned SGD at the reference batch %d, mean test accuracy %.4f. A method's critical batch is"
      " the largest batch of the grid whose mean test accuracy is within %.2f of the target (or above it) with"
      " every test seed measured and none diverged." % (st.ref, ref_mean, WITHIN))
    if ref_div or ref_missing:
        p("Note: the reference itself has diverged or missing seeds (%s)." % ", ".join(ref_div + ref_missing))
    p("")
    p("| method | critical batch |")
    p("| --- | ---: |")
    # unmeasured[m]: the grid batches above m's critical batch where m has no selection run, so
    # its critical batch may be larger than the table's
    crit, unmeasured = {}, {}
    for m in st.methods:
        ok = []
        for b in st.batches:
            if not chosen.get((m, b)):
                continue
            mean, half, n, div, missing = summary(res[(m, b)])
            if mean is not None and not div and not missing and mean >= ref_mean - WITHIN - 1e-12:
                ok.append(b)
        crit[m] = max(ok) if ok else None
        unmeasured[m] = [b for b in st.batches if b > (crit[m] or 0) and not chosen.get((m, b))]
        p("| %s | %s%s |" % (m, crit[m] if crit[m] else "none",
                             "; not measured at %s" % ", ".join(map(str, unmeasured[m])) if unmeasured[m] else ""))
    p("")
    _multiplier(p, st, crit, unmeasured)
    p("")


def _multiplier(p, st, crit, unmeasured):
    """AGS's critical batch over the largest baseline's, and what the unmeasured batches could change."""
    baselines = [m for m in ("sgd", "lars", "lamb") if m in st.methods]
    base = [crit[m] for m in baselines if crit[m]]
    # only a baseline's unmeasured batches above the largest measured baseline critical batch
    # could raise that largest one, and so lower the multiplier
    top = max(base) if base else 0
    above = {m: [b for b in unmeasured[m] if b > top] for m in baselines}
    open_base = ["%s at %s" % (m, ", ".join(map(str, above[m]))) for m in baselines if above[m]]
    bounds = []
    if open_base:
        bounds.append("a baseline's critical batch may be larger where it was not measured (%s), which would lower"
                      " AGS's multiplier" % "; ".join(open_base))
    if unmeasured.get("ags"):
        bounds.append("AGS's may be larger where it was not measured (at %s), which would raise it"
                      % ", ".join(map(str, unmeasured["ags"])))
    if "ags" not in st.methods:
        p("Critical-batch multiplier: not measured (ags is not among the methods).")
    elif not baselines:
        p("Critical-batch multiplier: not measured (no baseline among the methods).")
    elif crit.get("ags") and base:
        p("Critical-batch multiplier (AGS's critical batch / the largest baseline critical batch): %d / %d = %.3g."
          % (crit["ags"], max(base), crit["ags"] / max(base)))
    elif crit.get("ags"):
        p("Critical-batch multiplier: undefined; AGS meets the target up to batch %d, no baseline at any batch of the grid%s"
          " (the multiplier is at least %d / %d relative to the reference batch's SGD, which is not a grid batch of the baselines)."
          % (crit["ags"], " where it was measured" if open_base else "", crit["ags"], st.ref))
    else:
        p("Critical-batch multiplier: undefined; AGS meets the target at no batch of the grid%s."
          % ((" (the largest baseline critical batch is %d)" % max(base)) if base else ", nor does any baseline"))
    if bounds and "ags" in st.methods and baselines:
        p("")
        p("Not every batch was measured: %s." % "; ".join(bounds))


def _diff_table(p, st, title, note, other, named=False):
    """AGS minus another configuration per batch, paired by seed; other(b) gives (AGS's runs, the
    other's runs) and, with named, the other's method name, shown in its own column."""
    p("## " + title)
    p("")
    p(note)
    p("")
    if "ags" not in st.methods:
        p("Not measured: ags is not among the methods.")
        p("")
        return
    p("| batch |%s seed pairs | AGS - baseline (mean ± 95 %% paired t half-width) |" % (" baseline |" if named else ""))
    p("| ---: |%s ---: | ---: |" % (" --- |" if named else ""))
    means = []
    large = {}  # batch >= LARGE_FROM -> {seed: difference}
    for b in st.batches:
        r = other(b)
        a_runs, o_runs = r[0], r[1]
        name = (" %s |" % (r[2] if r[2] else "none")) if named else ""
        if a_runs is None or o_runs is None:
            p("| %d |%s 0 | not measured |" % (b, name))
            continue
        mean, half, n = paired(a_runs, o_runs)
        if mean is not None:
            means.append(mean)
            if b >= LARGE_FROM:
                large[b] = paired_diffs(a_runs, o_runs)
        p("| %d |%s %d | %s |" % (b, name, n, fmt_ci(mean, half, n, signed=True)))
    p("")
    if means:
        p("Mean over the %d batch%s with pairs: %+.4f (%s)." % (len(means), "" if len(means) == 1 else "es",
          sum(means) / len(means), "AGS ahead" if sum(means) > 0 else "AGS behind or level"))
    else:
        p("Mean over the batches: not measured (no seed pairs).")
    if large:
        seeds = [s for s in st.seeds + [st.sel] if all(s in d for d in large.values())]
        mean, half, n = mean_ci([sum(d[s] for d in large.values()) / len(large) for s in seeds])
        p("")
        p("Mean over the batches from %d up (%s): %s, over %d seed%s: each seed's mean difference over those"
          " batches, with the 95 %% t-interval of those means (a seed without a pair at one of the batches is"
          " left out)." % (LARGE_FROM, ", ".join(map(str, sorted(large))), fmt_ci(mean, half, n, signed=True), n,
                           "" if n == 1 else "s"))
    p("")


def _differences(p, st, chosen, res):
    def vs_tuned(b):
        if "sgd" not in st.methods or not chosen.get(("ags", b)) or not chosen.get(("sgd", b)):
            return None, None
        return res[("ags", b)], res[("sgd", b)]

    def vs_best(b):
        """AGS and the tuned baseline (sgd, lars, lamb) with the best mean test accuracy at batch b
        among those with every test seed measured and none diverged, and its name; None when there
        is none."""
        best = None
        for m in ("sgd", "lars", "lamb"):
            if m not in st.methods or not chosen.get((m, b)):
                continue
            mean, half, n, div, missing = summary(res[(m, b)])
            if mean is not None and not div and not missing and (best is None or mean > best[1]):
                best = (m, mean)
        if not chosen.get(("ags", b)) or best is None:
            return None, None, None
        return res[("ags", b)], res[(best[0], b)], best[0]

    def vs_weak(b):
        if not chosen.get(("ags", b)):
            return None, None
        seeds = [st.sel] + st.seeds
        return (st.test_runs("ags", b, chosen[("ags", b)], seeds),
                {s: st.read("linear", b, "1", "cosine", s) for s in seeds})
    _diff_table(p, st, "AGS minus tuned SGD (equal batch and epochs)",
                "Per batch, the test-seed-paired differences of the test accuracies of the two chosen configurations."
                if "sgd" in st.methods else "Not measured: sgd is not among the methods.", vs_tuned)
    _diff_table(p, st, "AGS minus the best tuned baseline (equal batch and epochs)",
                "Per batch, the baseline (sgd, lars or lamb) with the best mean test accuracy among those with every test"
                " seed measured and none diverged, and AGS's test-seed-paired differences from it.", vs_best, named=True)
    _diff_table(p, st, "AGS minus untuned linear scaling (the weak baseline)",
                "The weak baseline: SGD with linear scaling and no cap (`--lr-max 0`) at lr x1, cosine, not tuned. Pairs: the selection"
                " seed %s and the test seeds; on the selection seed AGS's run is the one its selection chose on validation"
                " accuracy, which favours AGS slightly. This comparison shows what tuning-free linear scaling loses;"
                " it is not a fair comparison of the methods." % st.sel, vs_weak)


def _not_measured(p, st, chosen, res):
    p("## Not measured")
    p("")
    p("- Steps or time to an accuracy: the runs log only their final line (`--quiet`), so this report compares final"
      " accuracies at the one budget of %s epochs. Steps to the target, with warmup-stable-decay branches off one"
      " constant-rate run at this study's choices, are the report of `experiments.ags_steps_run` (`make ags-report`"
      " writes it for lenet5 at batches 1024 and 4096: `results/ags-steps/lenet5/report.md`)." % st.epochs)
    p("- Wall-clock speed: runs use one thread on a shared machine; their times are not compared.")
    p("- Hyperparameters other than the rate multiplier and the schedule (momentum, weight decay, warmup, trust"
      " coefficients, AGS's bounds) keep the trainer's defaults for every method.")
    p("- Selection noise: each configuration is chosen on one seed (%s); the variance of that choice is not measured." % st.sel)
    p("- Other models, data sets and budgets than those above.")
    missing = len(st.missing_selection_runs())
    missing += sum(1 for c in st.cells() for s in st.seeds if chosen[c] and res[c][s] is None)
    if missing:
        p("")
        p("Incomplete: %d run%s of the study ha%s no row yet." % (missing, "" if missing == 1 else "s", "s" if missing == 1 else "ve"))
