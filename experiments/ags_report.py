"""The large-batch study's report, selection and missing runs, from its rows:

    python3 -m experiments.ags_report --results results/ags-study/STUDY [--out FILE] [--note TEXT] [ACTION]

--results reads the rows and grid options of a study folder (runs.jsonl, manifest.json), as
experiments.ags_study_run writes them or experiments.convert_ags_logs converted them. ACTION:
report (default: writes --out, or prints), select (a line "METHOD BATCH MULT SCHEDULE" per tuned
cell, "-" for none), print-selection (lines "chosen METHOD BATCH MULT SCHEDULE" and "reference
BATCH MEAN WITHIN", the input of experiments.ags_steps_run), extensions (the selection runs of
the grids and their edge extensions that have no row, "METHOD BATCH MULT SCHEDULE SEED"). Exit
status: 0 done; 1 the rows or the manifest cannot be read; 2 bad options."""
import argparse
import sys

from experiments import rows as rows_mod, testbed as tb
from experiments.ags_study import Study, WITHIN, summary
from experiments.ags_report_text import report


def parser():
    p = argparse.ArgumentParser(prog="ags_report", description=__doc__.split("\n\n")[0])
    p.add_argument("--results", required=True, help="a study's folder: runs.jsonl and manifest.json")
    p.add_argument("--out", help="the report's file (default: standard output)")
    p.add_argument("--note", default="", help="a paragraph under the report's header (default: the manifest's note)")
    p.add_argument("action", nargs="?", default="report", choices=("report", "select", "print-selection", "extensions"))
    return p


def load(results, note=""):
    """(study, header): the Study of a results folder and what the report's header says of its
    source. Errors: OSError, ValueError, KeyError."""
    manifest, rows, header = rows_mod.read_study(results, note)
    return Study(manifest["model"], manifest["options"], rows), header


def selection_lines(study, action):
    """The lines of the select or print-selection action."""
    out = []
    prefix = ["chosen"] if action == "print-selection" else []
    for c in study.cells():
        s = study.select(*c)
        out.append(" ".join(map(str, prefix + [c[0], c[1], s[0] if s else "-", s[1] if s else "-"])))
    if action == "print-selection":
        chosen = study.select("sgd", study.ref)
        mean = summary(study.test_runs("sgd", study.ref, chosen, study.seeds))[0] if chosen else None
        out.append("reference %d %s %.6f" % (study.ref, "-" if mean is None else "%.6f" % mean, WITHIN))
    return out


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        study, header = load(args.results, args.note)
    except (OSError, ValueError, KeyError) as e:
        print("tula: ags_report: %s" % e, file=sys.stderr)
        return 1
    if args.action == "extensions":
        for run in study.missing_selection_runs():
            print(*run)
    elif args.action in ("select", "print-selection"):
        for line in selection_lines(study, args.action):
            print(line)
    else:
        tb.write_text(args.out, report(study, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
