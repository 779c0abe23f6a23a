"""The report of Local SGD's batch-test measurement (the EMA weight --batch-test-beta and the
growth cap --max-batch-growth), from its rows:

    python3 -m experiments.local_sgd_report --results results/local-sgd [--out FILE]

A table row per configuration (the fixed batch, then each EMA weight without a cap, then with
one), a column per seed: the final validation accuracy with the final global batch, or the epoch
the run diverged in. Exit status: 0 written; 1 the rows or the manifest cannot be read; 2 bad
options."""
import argparse
import re
import sys

from experiments import rows as rows_mod, testbed as tb


def label(row):
    """The configuration's name in the table."""
    if row["batch_test"] == "none":
        return "fixed batch %d" % row["batch"]
    cap = "no cap" if row["max_batch_growth"] is None else "growth cap %g" % row["max_batch_growth"]
    return "beta %g, %s" % (row["batch_test_beta"], cap)


def order(row):
    return (row["batch_test"] != "none", row["max_batch_growth"] or 0, row["batch_test_beta"] or 0)


def cell(row):
    if row is None:
        return "missing"
    if row["diverged"]:
        e = re.search(r"in epoch (\d+)", row["diverged"])
        return "diverged in epoch %s" % (e.group(1) if e else "?")
    if row["val_accuracy"] is None:
        return "failed"
    return "%.4f (%d)" % (row["val_accuracy"], row["final_batch"])


def table(rows, seeds):
    """The table's lines."""
    configs = {}
    for r in sorted(rows, key=order):
        configs.setdefault(r["run"], {"label": label(r), "seeds": {}})["seeds"][r["seed"]] = r
    out = ["| run | " + " | ".join("seed %d" % s for s in seeds) + " |",
           "| --- | " + " | ".join("---:" for _ in seeds) + " |"]
    for c in configs.values():
        out.append("| %s | " % c["label"] + " | ".join(cell(c["seeds"].get(s)) for s in seeds) + " |")
    return out


def report(manifest, rows, results):
    seeds = manifest["options"]["seeds"]
    epochs = rows[0]["command"].split("--epochs ")[1].split()[0] if rows else "?"
    w = ["# Local SGD's batch test: the EMA weight and the growth cap (%s)" % manifest["model"], "",
         "Written by `experiments/local_sgd_report.py` from the rows in `%s` (one per run, converted from the" % results,
         "measurement's logs); regenerate it with `make ags-report`. The measurement quoted in tula-train(1) under",
         "`--batch-test-beta` and `--max-batch-growth`: %s on Fashion-MNIST, seeds %s, the tula-train of commit %s."
         % (manifest["model"], ", ".join(map(str, seeds)), rows[0]["git_commit"] if rows else "?"),
         "Every run, with BATCH-TEST per row (NOTE.md of the logs, the manifest's provenance, says where they ran):", "",
         "    " + manifest["command"], ""]
    w += ["- `%s`: `%s`" % (k, v) for k, v in manifest["batch_test"].items()]
    w += ["", "Validation accuracy after %s epochs (final global batch):" % epochs, ""]
    w += table(rows, seeds)
    if manifest.get("conclusion"):
        w += ["", manifest["conclusion"].strip()]
    return "\n".join(w) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="local_sgd_report", description=__doc__.split("\n\n")[0])
    p.add_argument("--results", required=True, help="the folder of runs.jsonl and manifest.json")
    p.add_argument("--out", help="the report's file (default: standard output)")
    args = p.parse_args(argv)
    try:
        manifest, rows, header = rows_mod.read_study(args.results)
        text = report(manifest, rows, header["results"])
    except (OSError, ValueError, KeyError, IndexError) as e:
        print("tula: local_sgd_report: %s" % e, file=sys.stderr)
        return 1
    tb.write_text(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
