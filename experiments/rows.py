"""A study's table of runs: results/<study>/runs.jsonl, one JSON object a line and a run a row,
and results/<study>/manifest.json, what the rows are (the study, its model, its grid options,
where the runs were made and where the rows came from)."""
import json
import os

# The fields of a row, in the order they are written. Unknown values are null.
FIELDS = (
    "study",           # the study's name (its folder under results/)
    "subset",          # null for the study's own runs; a name for a side experiment's runs
    "method",          # sgd, lars, lamb, ags, ags-sqrt, ags-first, or linear (the weak baseline)
    "batch",           # global batch
    "lr_mult",         # multiplier of the method's base learning rate
    "schedule",        # cosine or wsd (a steps study's trunks and probes: constant)
    "seed",
    "val_accuracy",    # final validation accuracy (null: none, or not finite)
    "test_accuracy",   # final test accuracy (null: none, or not finite)
    "train_seconds",
    "done",            # the run ended normally: tula-train's done line, or its --summary file
    "diverged",        # tula-train's divergence message, or null
    "device",          # cpu or cuda
    "host",
    "git_commit",      # of the trainer's source
    "binary_sha256",   # of the trainer's binary
    "command",         # the tula-train command line
    "output",          # tula-train's output as logged, a string a line
)
# A steps study's rows (experiments.convert_ags_steps_logs, experiments.ags_steps_run) add run
# (trunk, T{T} or a probe's rate{R}), epochs, decay_epochs, steps_per_epoch and, when converted,
# logged_by (the script named in the log's command line).


def read_rows(path):
    """The rows of a runs.jsonl file, as dicts. Errors: OSError, ValueError (a line that is not
    a JSON object, named by its number)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise ValueError("%s:%d: not JSON (%s)" % (path, i, e))
            if not isinstance(row, dict):
                raise ValueError("%s:%d: not a JSON object" % (path, i))
            rows.append(row)
    return rows


def row_line(row):
    """The row as one line of runs.jsonl: its FIELDS in order, then any others sorted."""
    keys = [k for k in FIELDS if k in row] + sorted(k for k in row if k not in FIELDS)
    return json.dumps({k: row[k] for k in keys}, ensure_ascii=False, allow_nan=False) + "\n"


def write_rows(path, rows):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(row_line(row))


def read_manifest(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_manifest(path, manifest):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")


def read_study(folder, note=""):
    """(manifest, rows, header) of a study's results folder; header: what a report's header says
    of it: the "results" folder, whether its rows were "converted" from logs (the manifest names a
    converter), the study's "command", a "note" paragraph (note, else the manifest's) and the
    "provenance" text. Errors: OSError, ValueError."""
    manifest = read_manifest(os.path.join(folder, "manifest.json"))
    rows = read_rows(os.path.join(folder, "runs.jsonl"))
    header = {"results": os.path.normpath(folder), "converted": "converter" in manifest.get("source", {}),
              "command": manifest.get("command") or "", "note": note or manifest.get("note") or "",
              "provenance": manifest.get("provenance")}
    return manifest, rows, header


def header_source(p, header):
    """Appends, by p(line), what a report's header says below its first paragraph from read_study's
    header: a blank line, the study's command as a code line and a blank line, then the note and
    the provenance, each where the header has one and followed by a blank line."""
    p("")
    p("    " + header["command"])
    p("")
    if header.get("note"):
        p(header["note"])
        p("")
    if header.get("provenance") is not None:
        p(header["provenance"].strip())
        p("")
