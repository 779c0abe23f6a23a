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
import hashlib
import os
import re
import sys

from experiments import rows as rows_mod
from experiments.convert_ags_logs import _device, convert_study, output_fields, read_note, source, study_parser
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
    output_fields(row, output)
    for line in output:
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
        "provenance": read_note(args.logs),
        "source": dict(source("convert_ags_steps_logs", args.logs, args.argv, sums), file_sha256=files),
    }


def _steps_options(p):
    """Adds the steps study's own options to the parser p."""
    p.add_argument("--batches", default="1024 4096")
    p.add_argument("--methods", default="ags lamb")
    p.add_argument("--totals", default="3 5 10 15 20 25 30 40")
    p.add_argument("--decay-share", type=float, default=0.2)


def parser():
    return study_parser("convert_ags_steps_logs", __doc__, _steps_options)


def main(argv=None):
    return convert_study("convert_ags_steps_logs", parser(), read_logs, manifest_of, argv)


if __name__ == "__main__":
    sys.exit(main())
