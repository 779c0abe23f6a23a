"""The large-batch study's report, selection and missing runs, from its rows:

    python3 -m experiments.ags_report --results results/ags-study/STUDY [--out FILE] [ACTION]
    python3 -m experiments.ags_report --logs DIR GRID-OPTIONS [--command TEXT] [--note TEXT] [--out FILE] [ACTION]

--results reads the rows and grid options of a study folder (runs.jsonl, manifest.json);
--logs converts a folder of scripts/ags-study logs on the fly (its NOTE.md is the provenance),
the way scripts/ags-study calls it, with its grid options. ACTION: report (default: writes --out,
or prints), select (a line "METHOD BATCH MULT SCHEDULE" per tuned cell, "-" for none),
print-selection (lines "chosen METHOD BATCH MULT SCHEDULE" and "reference BATCH MEAN WITHIN", the
input of scripts/ags-steps), extensions (the selection runs of the grids and their edge
extensions that have no row, "METHOD BATCH MULT SCHEDULE SEED"). Exit status: 0 done; 1 the rows
or the manifest cannot be read; 2 bad options."""
import argparse
import os
import sys

from experiments import rows as rows_mod
from experiments.ags_study import Study, WITHIN, summary
from experiments.ags_report_text import report
from experiments.convert_ags_logs import read_logs


def parser():
    p = argparse.ArgumentParser(prog="ags_report", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--results", help="a study's folder: runs.jsonl and manifest.json")
    src.add_argument("--logs", help="a folder of scripts/ags-study logs")
    p.add_argument("--out", help="the report's file (default: standard output)")
    p.add_argument("--model", default="lenet5")
    p.add_argument("--batches", default="1024 2048 4096")
    p.add_argument("--reference-batch", type=int, default=64)
    p.add_argument("--methods", default="sgd lars lamb ags")
    p.add_argument("--lr-mults", default="0.5 1 2")
    p.add_argument("--schedules", default="cosine wsd")
    p.add_argument("--extend-edges", type=int, default=0)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--select-seed", type=int, default=1)
    p.add_argument("--seeds", default="2 3 4")
    p.add_argument("--val-split", type=int, default=10000)
    p.add_argument("--command", default="", help="the study's command line, shown in the report")
    p.add_argument("--note", default="", help="a paragraph under the report's header")
    p.add_argument("action", nargs="?", default="report", choices=("report", "select", "print-selection", "extensions"))
    return p


def load(args):
    """(study, header): the Study and what the report's header says of its source."""
    if args.results:
        manifest = rows_mod.read_manifest(os.path.join(args.results, "manifest.json"))
        rows = rows_mod.read_rows(os.path.join(args.results, "runs.jsonl"))
        header = {"results": os.path.normpath(args.results), "logs": manifest["source"]["logs"],
                  "command": manifest.get("command") or "", "note": args.note, "provenance": manifest.get("provenance")}
        return Study(manifest["model"], manifest["options"], rows), header
    rows, _ = read_logs(args.logs, args.model, strict=False)
    options = {"epochs": args.epochs, "val_split": args.val_split, "methods": args.methods.split(),
               "schedules": args.schedules.split(), "lr_mults": args.lr_mults.split(), "extend_edges": args.extend_edges,
               "batches": args.batches.split(), "reference_batch": args.reference_batch,
               "select_seed": args.select_seed, "seeds": args.seeds.split()}
    try:
        with open(os.path.join(args.logs, "NOTE.md"), errors="replace") as f:
            provenance = f.read()
    except OSError:
        provenance = None
    header = {"results": None, "logs": args.logs, "command": args.command, "note": args.note, "provenance": provenance}
    return Study(args.model, options, rows), header


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        study, header = load(args)
    except (OSError, ValueError, KeyError) as e:
        print("tula: ags_report: %s" % e, file=sys.stderr)
        return 1
    if args.action == "extensions":
        for run in study.missing_selection_runs():
            print(*run)
    elif args.action in ("select", "print-selection"):
        prefix = ["chosen"] if args.action == "print-selection" else []
        for c in study.cells():
            s = study.select(*c)
            print(*prefix, c[0], c[1], s[0] if s else "-", s[1] if s else "-")
        if args.action == "print-selection":
            chosen = study.select("sgd", study.ref)
            mean = summary(study.test_runs("sgd", study.ref, chosen, study.seeds))[0] if chosen else None
            print("reference", study.ref, "-" if mean is None else "%.6f" % mean, "%.6f" % WITHIN)
    else:
        text = report(study, header)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
        else:
            sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
