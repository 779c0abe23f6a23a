"""Turns a large-batch study's tula-train logs (one log per run, named
METHOD-BATCH-lrMULT-SCHEDULE-seedS.log, each starting with a "tula: ags-study: command: " line,
and a NOTE.md) into its rows and manifest:

    python3 -m experiments.convert_ags_logs --logs DIR --out results/ags-study/STUDY \\
        [the study's grid options, as experiments.ags_study_run takes them] [--command TEXT] [-- extra tula-train options]

Every log of DIR and of its subfolders becomes a row (a subfolder's runs are a side experiment,
named by the row's subset); the row keeps the log's command and output, so that row_to_log gives
the log back byte for byte, and the manifest keeps each log's SHA-256 to check that against.
Exit status: 0 written; 1 a log that cannot be converted; 2 bad options.

The other converters (convert_ags_steps_logs, convert_local_sgd_logs) share its reading of
tula-train's output (output_fields), its manifest's provenance and source (read_note, source)
and, for a study, its options and command (study_parser, convert_study)."""
import argparse
import hashlib
import math
import os
import re
import shlex
import sys

from experiments import rows as rows_mod, testbed as tb

PREFIX = "tula: ags-study: command: "
NAME = re.compile(r"^(?P<method>[a-z0-9]+(?:-[a-z0-9]+)*)-(?P<batch>[0-9]+)-lr(?P<mult>[0-9.]+)"
                  r"-(?P<schedule>[a-z]+)-seed(?P<seed>[0-9]+)\.log$")


def fmt_mult(x):
    """A multiplier as the logs' names spell it."""
    return "%.6g" % x


def _number(text):
    """A finite float of text, or None."""
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _device(command):
    """The --device of a tula-train command line (cpu when it has none; None without a command)."""
    if command is None:
        return None
    words = command.split()
    for i, w in enumerate(words):
        if w == "--device" and i + 1 < len(words):
            return words[i + 1]
        if w.startswith("--device="):
            return w.split("=", 1)[1]
    return "cpu"


def output_fields(row, output, diverged=True):
    """Sets the fields of row that tula-train's output lines give: done (True where they have a
    done line) with the test_accuracy, val_accuracy and train_seconds of the done line (the last
    one's), and, with diverged, the last divergence message (without its "tula-train: ")."""
    for line in output:
        if line.startswith("tula-train: done:"):
            row["done"] = True
            for key, v in re.findall(r"(\w+)=(\S+)", line):
                if key in ("test_accuracy", "val_accuracy", "train_seconds"):
                    row[key] = _number(v)
        elif diverged and line.startswith("tula-train: ") and "training diverged" in line:
            row["diverged"] = line[len("tula-train: "):]


def log_to_row(study, relpath, text, strict=True):
    """The row of one log, relpath its path under the study's log folder. strict: errors
    (ValueError) when the name does not follow the pattern or the text cannot be given back byte
    for byte; otherwise such a name gives None, and a log without its command line a row whose
    command is null."""
    subset, name = os.path.split(relpath)
    m = NAME.match(name)
    mult = float(m["mult"]) if m else None
    if not m or fmt_mult(mult) != m["mult"]:
        if not strict:
            return None
        raise ValueError("%s: not a METHOD-BATCH-lrMULT-SCHEDULE-seedS.log name with the multiplier in its plain form" % relpath)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    command, output = None, lines
    if lines and lines[0].startswith(PREFIX):
        command, output = lines[0][len(PREFIX):], lines[1:]
    row = {k: None for k in rows_mod.FIELDS}
    row.update(study=study, subset=subset or None, method=m["method"], batch=int(m["batch"]),
               lr_mult=int(mult) if mult.is_integer() else mult, schedule=m["schedule"], seed=int(m["seed"]),
               done=False, device=_device(command), command=command, output=output)
    output_fields(row, output)
    if strict and (command is None or row_to_log(row) != text):
        raise ValueError("%s: the row does not give the log back" % relpath)
    return row


def row_to_log(row):
    """The log text of a row: its command line and its output."""
    return "".join(line + "\n" for line in [PREFIX + row["command"]] + row["output"])


def log_name(row):
    """The log's path under the study's log folder."""
    name = "%s-%d-lr%s-%s-seed%d.log" % (row["method"], row["batch"], fmt_mult(row["lr_mult"]), row["schedule"], row["seed"])
    return os.path.join(row["subset"], name) if row["subset"] else name


def read_logs(logs, study, strict=True):
    """(rows, {log path: SHA-256}) of the *.log files of the folder logs, sorted by path: with
    strict, those of its subfolders too (log_to_row's strict); otherwise its own only."""
    paths = []
    for top, dirs, files in os.walk(logs):
        dirs.sort()
        paths += [os.path.relpath(os.path.join(top, f), logs) for f in files if f.endswith(".log")]
        if not strict:
            break
    rows, sums = [], {}
    for rel in sorted(paths):
        with open(os.path.join(logs, rel), "rb") as f:
            data = f.read()
        row = log_to_row(study, rel, data.decode("utf-8", errors="strict" if strict else "replace"), strict)
        if row is not None:
            rows.append(row)
            sums[rel] = hashlib.sha256(data).hexdigest()
    return rows, sums


def read_note(logs):
    """The text of the log folder's NOTE.md (a manifest's provenance), or None without one."""
    try:
        with open(os.path.join(logs, "NOTE.md"), encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def source(prog, logs, argv, sums):
    """A manifest's "source": the log folder logs, the commit of the repository around it
    (tb.git_commit, short and -dirty), the converter's command line (prog: its module under
    experiments, argv: its arguments) and sums, each log's SHA-256."""
    return {"logs": os.path.normpath(logs), "git_commit": tb.git_commit(logs, short=True, dirty=True),
            "converter": "python3 -m experiments.%s " % prog + " ".join(shlex.quote(a) for a in argv),
            "log_sha256": sums}


def manifest_of(args, sums):
    return {
        "study": args.study or os.path.basename(os.path.normpath(args.logs)),
        "model": args.model,
        "data": "fashion-mnist",
        "options": {
            "batches": [int(b) for b in args.batches.split()],
            "reference_batch": args.reference_batch,
            "methods": args.methods.split(),
            "lr_mults": [fmt_mult(float(x)) for x in args.lr_mults.split()],
            "schedules": args.schedules.split(),
            "extend_edges": args.extend_edges,
            "epochs": args.epochs,
            "select_seed": args.select_seed,
            "seeds": [int(s) for s in args.seeds.split()],
            "val_split": args.val_split,
            "extra": args.extra,
        },
        "command": args.command,
        "provenance": read_note(args.logs),
        "source": source("convert_ags_logs", args.logs, args.argv, sums),
    }


def study_parser(prog, doc, add_options):
    """The argument parser of a study's converter: --logs, --out, --study and --model, the
    study's own options (add_options(p) adds them), then --seeds, --val-split, --command and the
    extra tula-train options."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    p.add_argument("--logs", required=True)
    p.add_argument("--out", required=True, help="the study's results folder (runs.jsonl, manifest.json)")
    p.add_argument("--study", help="the study's name (default: the log folder's)")
    p.add_argument("--model", default="lenet5")
    add_options(p)
    p.add_argument("--seeds", default="2 3 4")
    p.add_argument("--val-split", type=int, default=10000)
    p.add_argument("--command", help="the study's command as its report shows it")
    p.add_argument("extra", nargs="*", help="the study's extra tula-train options (after --)")
    return p


def convert_study(prog, p, read, make_manifest, argv=None):
    """Converts a study's log folder with the parser p: read(logs, study) gives (rows, sums,
    ...), make_manifest(args, sums, ...) the manifest (args.argv: the arguments, args.study: the
    study's name). Writes runs.jsonl and manifest.json under --out; the exit status: 0 written,
    1 a log that cannot be converted, 2 no log folder."""
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    args.argv = argv
    args.study = args.study or os.path.basename(os.path.normpath(args.logs))
    if not os.path.isdir(args.logs):
        print("tula: %s: no log folder '%s'" % (prog, args.logs), file=sys.stderr)
        return 2
    try:
        rows, *sums = read(args.logs, args.study)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        print("tula: %s: %s" % (prog, e), file=sys.stderr)
        return 1
    rows_mod.write_rows(os.path.join(args.out, "runs.jsonl"), rows)
    rows_mod.write_manifest(os.path.join(args.out, "manifest.json"), make_manifest(args, *sums))
    print("tula: %s: %d rows from %s in %s" % (prog, len(rows), args.logs, shlex.quote(args.out)))
    return 0


def _grid_options(p):
    """Adds the grid options of the large-batch study to the parser p."""
    p.add_argument("--batches", default="1024 2048 4096")
    p.add_argument("--reference-batch", type=int, default=64)
    p.add_argument("--methods", default="sgd lars lamb ags")
    p.add_argument("--lr-mults", default="0.5 1 2")
    p.add_argument("--schedules", default="cosine wsd")
    p.add_argument("--extend-edges", type=int, default=0)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--select-seed", type=int, default=1)


def parser():
    return study_parser("convert_ags_logs", __doc__, _grid_options)


def main(argv=None):
    return convert_study("convert_ags_logs", parser(), read_logs, manifest_of, argv)


if __name__ == "__main__":
    sys.exit(main())
