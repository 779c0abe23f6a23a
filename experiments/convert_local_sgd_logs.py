"""Turns the logs of Local SGD's batch-test measurement (one log per run, named
beta-{none|B}-seedS.log or growth{G}-B-seedS.log, each a "command: ..." line and tula-train's
output, and a NOTE.md) into its rows and manifest:

    python3 -m experiments.convert_local_sgd_logs --logs DIR --out results/local-sgd

A row keeps the log's command and output, so that row_to_log gives the log back byte for byte;
the manifest keeps each log's SHA-256 to check that against, NOTE.md as the provenance, and the
runs' command. Exit status: 0 written; 1 a log that cannot be converted; 2 bad options."""
import argparse
import hashlib
import os
import re
import shlex
import sys

from experiments import rows as rows_mod
from experiments.convert_ags_logs import output_fields, source
from experiments.runner import diverged_line, option

NAME = re.compile(r"^(?:beta-(?P<beta>none|[0-9.]+)|growth(?P<growth>[0-9]+)-(?P<gbeta>[0-9.]+))-seed(?P<seed>[0-9]+)\.log$")
PREFIX = "command: "
EPOCH_BATCH = re.compile(r"^epoch \d+/\d+ .* batch (\d+)$")
# the runs' command, the trainer and the batch test's options left as words to fill in
COMMAND = ("mpirun --allow-run-as-root --oversubscribe -np 2 TRAINER --model lenet5 --local-steps 4 --batch-size 128"
           " --epochs 5 --val-split 10000 --seed SEED BATCH-TEST --no-db --threads 1 --prefetch off")
BATCH_TEST = {"beta-none": "--batch-test none", "beta-B": "--batch-test norm --batch-test-beta B",
              "growthG-B": "--batch-test norm --batch-test-beta B --max-batch-growth G"}


def _num(text):
    x = float(text)
    return int(x) if x.is_integer() else x


def log_to_row(name, text):
    """The row of one log. Errors: ValueError (a name off the pattern, a log without its command
    line or one the row does not give back)."""
    m = NAME.match(name)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not m or not lines or not lines[0].startswith(PREFIX):
        raise ValueError("%s: not a beta-B-seedS.log or growthG-B-seedS.log with its command line" % name)
    command, output = lines[0][len(PREFIX):], lines[1:]
    words = command.split()
    row = {k: None for k in rows_mod.FIELDS}
    row.update(study="local-sgd", method="local-sgd", batch=int(option(words, "--batch-size")), schedule="cosine",
               seed=int(m["seed"]), done=False, diverged=diverged_line(output), device="cpu", command=command, output=output,
               run=name[:-len("-seed%s.log" % m["seed"])], batch_test=option(words, "--batch-test"),
               batch_test_beta=None if option(words, "--batch-test-beta") is None else _num(option(words, "--batch-test-beta")),
               max_batch_growth=None if option(words, "--max-batch-growth") is None else _num(option(words, "--max-batch-growth")),
               final_batch=None)
    for line in output:
        e = EPOCH_BATCH.match(line)
        if e:
            row["final_batch"] = int(e.group(1))
    output_fields(row, output, diverged=False)
    if row_to_log(row) != text:
        raise ValueError("%s: the row does not give the log back" % name)
    return row


def row_to_log(row):
    """The log text of a row: its command line and its output."""
    return "".join(line + "\n" for line in [PREFIX + row["command"]] + row["output"])


def log_name(row):
    return "%s-seed%d.log" % (row["run"], row["seed"])


def conclusion(note):
    """What NOTE.md says after its table (its paragraphs after the last table line)."""
    lines = note.split("\n")
    last = max((i for i, ln in enumerate(lines) if ln.startswith("|")), default=len(lines) - 1)
    return "\n".join(lines[last + 1:]).strip() + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="convert_local_sgd_logs", description=__doc__.split("\n\n")[0])
    p.add_argument("--logs", required=True)
    p.add_argument("--out", required=True, help="the results folder (runs.jsonl, manifest.json)")
    p.add_argument("--trainer-commit", default="92a5f28", help="the commit of the tula-train that made the logs")
    args = p.parse_args(argv)
    try:
        names = sorted(f for f in os.listdir(args.logs) if f.endswith(".log"))
        rows, sums = [], {}
        for name in names:
            with open(os.path.join(args.logs, name), "rb") as f:
                data = f.read()
            row = log_to_row(name, data.decode("utf-8"))
            row["git_commit"] = args.trainer_commit
            rows.append(row)
            sums[name] = hashlib.sha256(data).hexdigest()
        with open(os.path.join(args.logs, "NOTE.md"), encoding="utf-8") as f:
            note = f.read()
    except (OSError, UnicodeDecodeError, ValueError) as e:
        print("tula: convert_local_sgd_logs: %s" % e, file=sys.stderr)
        return 1
    manifest = {
        "study": "local-sgd", "model": "lenet5", "data": "fashion-mnist",
        "options": {"seeds": sorted({r["seed"] for r in rows}), "runs": sorted({r["run"] for r in rows})},
        "command": COMMAND, "batch_test": BATCH_TEST,
        "conclusion": conclusion(note),
        "provenance": note,
        "source": source("convert_local_sgd_logs", args.logs, argv, sums),
    }
    rows_mod.write_rows(os.path.join(args.out, "runs.jsonl"), rows)
    rows_mod.write_manifest(os.path.join(args.out, "manifest.json"), manifest)
    print("tula: convert_local_sgd_logs: %d rows from %s in %s" % (len(rows), args.logs, shlex.quote(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
