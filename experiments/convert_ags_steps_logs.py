"""Turns a steps study's tula-train logs (one log per run, named METHOD-BATCH-seedS-trunk.log or
METHOD-BATCH-seedS-T{T}.log, each starting with a "tula: ags-steps: command: " line, a
selection.txt and a NOTE.md) into its rows and manifest:

    python3 -m experiments.convert_ags_steps_logs --logs DIR --out results/ags-steps/STUDY \\
        [the study's options, as experiments.ags_steps_run takes them] [--command TEXT] [-- extra tula-train options]

Every log of DIR and of its subfolders becomes a row (a subfolder's runs are a side experiment,
named by the row's subset; a probe's log, METHOD-BATCH-seedS-rateR.log, has run "rateR"). A row
keeps the log's command and output, so that row_to_log gives the log back byte for byte; the
manifest keeps each log's SHA-256 to check that against, and the lines and SHA-256 of the other
files (the selections, NOTE.md as the provenance). A run's multiplier is the one chosen for its
method and batch in the selection of its folder (null without one). Exit status: 0 written; 1 a
log that cannot be converted; 2 bad options."""
import argparse
import hashlib
import os
import re
import shlex
import sys

from experiments import rows as rows_mod
from experiments.convert_ags_logs import _device, _git_commit, _number
from experiments.runner import option

NAME = re.compile(r"^(?P<method>[a-z0-9]+(?:-[a-z0-9]+)*)-(?P<batch>[0-9]+)-seed(?P<seed>[0-9]+)"
                  r"-(?P<run>trunk|T[0-9]+|rate[0-9.]+)\.log$")
COMMAND = re.compile(r"^tula: (?P<by>[a-z][a-z-]*): command: (?P<command>.*)$")
SELECTION = "selection.txt"


def _option(command, name):
    """The value of a tula-train option in a command line, or None."""
    return option((command or "").split(), name)


def _int(text):
    return int(text) if text is not None and text.isdigit() else None


def chosen_mults(lines):
    """{(method, batch): multiplier} of a selection's "chosen METHOD BATCH MULT SCHEDULE" lines."""
    out = {}
    for line in lines:
        w = line.split()
        if len(w) == 5 and w[0] == "chosen" and w[3] != "-":
            x = float(w[3])
            out[(w[1], int(w[2]))] = int(x) if x.is_integer() else x
    return out


def log_to_row(study, relpath, text, mults=None, strict=True):
    """The row of one log, relpath its path under the study's log folder, mults the chosen
    multipliers of its folder (chosen_mults). strict: errors (ValueError) when the name does not
    follow the pattern or the text cannot be given back byte for byte; otherwise such a name
    gives None."""
    subset, name = os.path.split(relpath)
    m = NAME.match(name)
    if not m:
        if not strict:
            return None
        raise ValueError("%s: not a METHOD-BATCH-seedS-(trunk|T{T}|rate{R}).log name" % relpath)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    by, command, output = None, None, lines
    c = COMMAND.match(lines[0]) if lines else None
    if c:
        by, command, output = c["by"], c["command"], lines[1:]
    batch = int(m["batch"])
    row = {k: None for k in rows_mod.FIELDS}
    row.update(study=study, subset=subset or None, method=m["method"], batch=batch,
               lr_mult=(mults or {}).get((m["method"], batch)), schedule=_option(command, "--schedule"),
               seed=int(m["seed"]), done=False, device=_device(command), command=command, output=output,
               run=m["run"], epochs=_int(_option(command, "--epochs")),
               decay_epochs=_int(_option(command, "--decay-epochs")), steps_per_epoch=None, logged_by=by)
    for line in output:
        if line.startswith("tula-train: done:"):
            row["done"] = True
            for key, v in re.findall(r"(\w+)=(\S+)", line):
                if key in ("test_accuracy", "val_accuracy", "train_seconds"):
                    row[key] = _number(v)
        elif line.startswith("tula-train: ") and "training diverged" in line:
            row["diverged"] = line[len("tula-train: "):]
        g = re.search(r"\d+ epochs of (\d+) steps", line)
        if g and row["steps_per_epoch"] is None:
            row["steps_per_epoch"] = int(g.group(1))
    if strict and row_to_log(row) != text:
        raise ValueError("%s: the row does not give the log back" % relpath)
    return row


def row_to_log(row):
    """The log text of a row: its command line (when it has one) and its output."""
    head = [] if row["command"] is None else ["tula: %s: command: %s" % (row["logged_by"], row["command"])]
    return "".join(line + "\n" for line in head + row["output"])


def log_name(row):
    """The log's path under the study's log folder."""
    name = "%s-%d-seed%d-%s.log" % (row["method"], row["batch"], row["seed"], row["run"])
    return os.path.join(row["subset"], name) if row["subset"] else name


def read_lines(path):
    """The lines of a text file, or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except OSError:
        return None


def read_logs(logs, study, strict=True):
    """(rows, {log path: SHA-256}, {other file's path: SHA-256}) of the folder logs, sorted by
    path: its *.log files (with strict, those of its subfolders too: log_to_row's strict) and,
    with strict, its other files."""
    paths, others = [], []
    for top, dirs, files in os.walk(logs):
        dirs.sort()
        for f in files:
            (paths if f.endswith(".log") else others).append(os.path.relpath(os.path.join(top, f), logs))
        if not strict:
            break
    mults = {}
    rows, sums = [], {}
    for rel in sorted(paths):
        folder = os.path.dirname(rel)
        if folder not in mults:
            mults[folder] = chosen_mults(read_lines(os.path.join(logs, folder, SELECTION)) or [])
        with open(os.path.join(logs, rel), "rb") as f:
            data = f.read()
        row = log_to_row(study, rel, data.decode("utf-8", errors="strict" if strict else "replace"), mults[folder], strict)
        if row is not None:
            rows.append(row)
            sums[rel] = hashlib.sha256(data).hexdigest()
    files = {}
    for rel in sorted(others) if strict else []:
        with open(os.path.join(logs, rel), "rb") as f:
            files[rel] = hashlib.sha256(f.read()).hexdigest()
    return rows, sums, files


def manifest_of(args, sums, files):
    note = None
    try:
        with open(os.path.join(args.logs, "NOTE.md"), encoding="utf-8") as f:
            note = f.read()
    except OSError:
        pass
    subsets = {}
    for rel in files:
        folder, name = os.path.split(rel)
        if folder and name == SELECTION:
            subsets[folder] = {"selection": read_lines(os.path.join(args.logs, rel))}
    return {
        "study": args.study,
        "model": args.model,
        "data": "fashion-mnist",
        "options": {
            "selection": read_lines(os.path.join(args.logs, SELECTION)),
            "batches": [int(b) for b in args.batches.split()],
            "methods": args.methods.split(),
            "totals": [int(t) for t in args.totals.split()],
            "decay_share": args.decay_share,
            "seeds": [int(s) for s in args.seeds.split()],
            "val_split": args.val_split,
            "extra": args.extra,
        },
        "subsets": subsets,
        "command": args.command,
        "provenance": note,
        "source": {
            "logs": os.path.normpath(args.logs),
            "git_commit": _git_commit(args.logs),
            "converter": "python3 -m experiments.convert_ags_steps_logs " + " ".join(shlex.quote(a) for a in args.argv),
            "log_sha256": sums,
            "file_sha256": files,
        },
    }


def parser():
    p = argparse.ArgumentParser(prog="convert_ags_steps_logs", description=__doc__.split("\n\n")[0])
    p.add_argument("--logs", required=True)
    p.add_argument("--out", required=True, help="the study's results folder (runs.jsonl, manifest.json)")
    p.add_argument("--study", help="the study's name (default: the log folder's)")
    p.add_argument("--model", default="lenet5")
    p.add_argument("--batches", default="1024 4096")
    p.add_argument("--methods", default="ags lamb")
    p.add_argument("--totals", default="3 5 10 15 20 25 30 40")
    p.add_argument("--decay-share", type=float, default=0.2)
    p.add_argument("--seeds", default="2 3 4")
    p.add_argument("--val-split", type=int, default=10000)
    p.add_argument("--command", help="the study's command as its report shows it")
    p.add_argument("extra", nargs="*", help="the study's extra tula-train options (after --)")
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    args.argv = argv
    args.study = args.study or os.path.basename(os.path.normpath(args.logs))
    if not os.path.isdir(args.logs):
        print("tula: convert_ags_steps_logs: no log folder '%s'" % args.logs, file=sys.stderr)
        return 2
    try:
        rows, sums, files = read_logs(args.logs, args.study)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        print("tula: convert_ags_steps_logs: %s" % e, file=sys.stderr)
        return 1
    rows_mod.write_rows(os.path.join(args.out, "runs.jsonl"), rows)
    rows_mod.write_manifest(os.path.join(args.out, "manifest.json"), manifest_of(args, sums, files))
    print("tula: convert_ags_steps_logs: %d rows from %s in %s" % (len(rows), args.logs, shlex.quote(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
