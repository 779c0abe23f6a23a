"""What the studies' runners (ags_study_run, ags_steps_run) share: their option checks (one
`tula: NAME: ` message and exit status 2 for the first problem), the trainer's place, the manifest
of a results folder, and the pool's start and its stop by a signal."""
import argparse
import os
import re
import shlex
import sys

from experiments import rows as rows_mod
from experiments import runner
from experiments import testbed as tb
from experiments.recipes import METHODS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Usage(Exception):
    """A bad option: the message of exit status 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are Usage, its description and epilog a runner's
    docstring (its first paragraph, and all after its second)."""

    def __init__(self, prog, doc):
        super().__init__(prog=prog, description=doc.split("\n\n")[0], epilog=doc.split("\n\n", 2)[2],
                         formatter_class=argparse.RawDescriptionHelpFormatter)

    def error(self, message):
        raise Usage(message)

    def add_common(self, folder):
        """The options both runners have, after their own."""
        self.add_argument("--seeds", default="2 3 4")
        self.add_argument("--val-split", default="10000")
        self.add_argument("--jobs", default="2")
        self.add_argument("--results", help="the study's folder (default results/%s/MODEL)" % folder)
        self.add_argument("--from-rows", action="store_true", help="train nothing; write the report from the rows")
        self.add_argument("--out", help="the report (default: RESULTS/report.md)")
        self.add_argument("--trainer", help="the tula-train to run (default $B/bin/tula-train)")
        self.add_argument("--note", default="", help="a paragraph under the report's header")
        self.add_argument("extra", nargs="*", help="extra tula-train options (after --)")


def words(option, text):
    """The words of a list option: not empty, none twice. Errors: Usage."""
    w = text.split()
    if not w:
        raise Usage("%s is empty" % option)
    dup = sorted({x for x in w if w.count(x) > 1})
    if dup:
        raise Usage("%s: '%s' is given twice" % (option, dup[0]))
    return w


def integer(option, text, least=1):
    """A whole number of at least least, written in digits. Errors: Usage."""
    if not re.fullmatch(r"[0-9]+", text or "") or int(text) < least:
        kind = "a positive integer" if least == 1 else "a non-negative integer"
        raise Usage("%s: '%s' is not %s" % (option, text, kind))
    return int(text)


def integers(option, text, least=1):
    """A list option of whole numbers (integer), none twice in its plain form. Errors: Usage."""
    return [int(x) for x in words(option, " ".join(str(integer(option, x, least)) for x in words(option, text)))]


def methods(text):
    out = words("--methods", text)
    for m in out:
        if m not in METHODS:
            raise Usage("--methods: unknown method '%s' (valid: %s)" % (m, ", ".join(METHODS)))
    return out


def model(text):
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", text):
        raise Usage("--model: '%s' is not a model name (e.g. lenet5)" % text)
    return text


def check_extra(extra, own, what):
    """The extra tula-train options set none of the runner's own options. Errors: Usage."""
    for x in extra:
        if x.split("=", 1)[0] in own + ("--summary",):
            raise Usage("extra option '%s' is set by the %s itself" % (x, what))


def trainer(given):
    """The tula-train to run: given, else $B/bin/tula-train (B: the build directory, default
    build). Errors: Usage."""
    path = given or os.path.join(os.environ.get("B", "build"), "bin", "tula-train")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise Usage("tula-train not found at '%s'; build it (make) or pass --trainer PATH" % path)
    return path


def command_line(prog, argv):
    return " ".join(shlex.quote(a) for a in ["python3", "-m", prog] + list(argv))


def write_manifest(results, fields, trainer_path):
    """Writes results/manifest.json: an existing manifest's keys kept (its provenance and the
    source of rows converted from logs), fields over them, and the runner's source."""
    path = os.path.join(results, "manifest.json")
    manifest = rows_mod.read_manifest(path) if os.path.exists(path) else {}
    manifest.update(fields)
    source = dict(manifest.get("source") or {})
    source.update(runner_commit=tb.git_commit(REPO, short=True, dirty=True), trainer=trainer_path)
    manifest["source"] = source
    manifest.setdefault("provenance", None)
    rows_mod.write_manifest(path, manifest)


def start(a, argv, prog, folder, options, train_nothing):
    """(results, out, trainer) of a runner's parsed arguments a: the results folder (--results,
    default results/FOLDER/MODEL), the report's file and the trainer (None when train_nothing,
    which needs the folder's rows); with a trainer, the folder's manifest is written. Errors: Usage."""
    results = a.results or os.path.join("results", folder, a.model)
    out = a.out or os.path.join(results, "report.md")
    if train_nothing:
        if not os.path.isfile(os.path.join(results, "runs.jsonl")):
            raise Usage("--from-rows: no rows in '%s' (runs.jsonl)" % results)
        return results, out, None
    path = trainer(a.trainer)
    os.makedirs(results, exist_ok=True)
    write_manifest(results, {"study": os.path.basename(os.path.normpath(results)), "model": a.model, "data": "fashion-mnist",
                             "options": options, "note": a.note or None, "command": command_line(prog, argv)}, path)
    return results, out, path


def finish(results, out, note, report_of, say, failed, what):
    """Writes the report report_of(rows, header) of the results folder to out; the exit status:
    1 when failed runs (what they are) are counted, else 0."""
    rows = rows_mod.read_rows(os.path.join(results, "runs.jsonl"))
    _, _, header = rows_mod.read_study(results, note)
    tb.write_text(out, report_of(rows, header))
    say("wrote %s" % out)
    if failed:
        say("%d %s; see their rows' output in %s" % (failed, what, results))
        return 1
    return 0


def base_row(study, trainer_path):
    """The fields every row of a runner starts with."""
    return {"study": study, "subset": None, "git_commit": None, "binary_sha256": tb.file_sha256(trainer_path)}


def say_to(name):
    def say(text):
        print("tula: %s: %s" % (name, text), file=sys.stderr, flush=True)
    return say


def main_of(name, run):
    """The exit status of run(say): its own, 2 for Usage, 128 + the signal's number when a
    signal stopped the pool (the runs in flight leave no row)."""
    say = say_to(name)
    try:
        return run(say)
    except Usage as e:
        say(str(e))
        return 2
    except runner.Stopped as e:
        say("%s; the runs in flight were stopped and are trained again by the next invocation" % e)
        return 128 + e.signum
    except (OSError, ValueError) as e:
        say(str(e))
        return 1
