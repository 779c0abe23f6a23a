"""The end-to-end evaluation (experiments.eval, experiments.eval_report) without a cluster: its
refusal of bad settings before a cluster would start, the batch scripts filled from
experiments/eval-job.sbatch, the readers of tula's and tula-train's JSON outputs, a job's row
from a fabricated summary file, and the report written from fabricated rows with hand-computed
figures."""

import contextlib
import io
import json
import os
import stat
import tempfile
import unittest
from unittest import mock

from experiments import eval as ev
from experiments import eval_report as er
from experiments import hole
from experiments import testbed as tb

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LIST_MODELS = "models for 1x28x28 input, 10 classes:\nlenet5             61706 parameters\nfmnist-cnn         1000 parameters\n"


def fake_build(d):
    """A build folder whose bin/tula-train lists two models and whose bin/tula does nothing."""
    b = os.path.join(d, "bin")
    os.makedirs(b)
    for name, body in (("tula-train", "printf '%s'" % LIST_MODELS.replace("\n", "\\n")), ("tula", "exit 0")):
        path = os.path.join(b, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n%s\n" % body)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return d


class Settings(unittest.TestCase):
    """A bad setting: exit status 2, one `tula: eval:` line naming it, no cluster and no output
    folder."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.build = fake_build(os.path.join(self.tmp.name, "build"))
        self.out = os.path.join(self.tmp.name, "out")

    def tearDown(self):
        self.tmp.cleanup()

    def run_main(self, gnuplot="/usr/bin/gnuplot", cluster_rc=None, **env):
        """(exit status, stderr, the cluster_run calls) of experiments.eval with env."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("EVAL_")}
        base.update(TULA_BUILD_DIR=self.build, EVAL_OUT=self.out)
        base.update(env)
        calls, err = [], io.StringIO()

        def cluster_run(*a, **kw):
            calls.append((a, kw))
            if cluster_rc is None:
                raise AssertionError("a cluster was started")
            return cluster_rc
        with mock.patch.dict(os.environ, base, clear=True), mock.patch.object(tb, "cluster_run", cluster_run), \
                mock.patch.object(ev.shutil, "which", lambda name: gnuplot if name == "gnuplot" else None), \
                contextlib.redirect_stderr(err):
            try:
                rc = ev.main([])
            except SystemExit as e:
                rc = e.code
        return rc, err.getvalue(), calls

    def refuse(self, needle, **env):
        rc, err, _ = self.run_main(**env)
        self.assertEqual(2, rc, env)
        self.assertEqual(1, len(err.splitlines()), err)
        self.assertTrue(err.startswith("tula: eval: "), err)
        self.assertIn(needle, err)
        self.assertFalse(os.path.exists(self.out))
        return err

    def test_refusals(self):
        err = self.refuse("nosuchnet", EVAL_MODELS="lenet5 nosuchnet")
        self.assertIn("(it has: lenet5 fmnist-cnn)", err)
        self.refuse("EVAL_MODELS", EVAL_MODELS=" ")
        self.refuse("EVAL_EPOCHS", EVAL_EPOCHS="four")
        self.refuse("EVAL_EPOCHS", EVAL_EPOCHS="0")
        self.refuse("EVAL_LIMIT_TRAIN", EVAL_LIMIT_TRAIN="-5")
        self.refuse("EVAL_TARGET", EVAL_TARGET="1.5")
        self.refuse("EVAL_TARGET", EVAL_TARGET="high")
        self.refuse("EVAL_TUNE_LR", EVAL_TUNE_LR="1 half")
        self.refuse("EVAL_TUNE_LR", EVAL_TUNE_LR="0")
        self.refuse("EVAL_TUNE_LR", EVAL_TUNE_LR="17")
        self.refuse("EVAL_TUNE_LR", EVAL_TUNE_LR=" ")

    def test_missing_tools(self):
        rc, err, _ = self.run_main(TULA_BUILD_DIR=os.path.join(self.tmp.name, "none"))
        self.assertEqual((1, 1), (rc, len(err.splitlines())))
        self.assertIn("no tula and tula-train in", err)
        rc, err, _ = self.run_main(gnuplot=None)
        self.assertEqual(1, rc)
        self.assertIn("gnuplot is not installed", err)

    def test_good_settings_start_one_cluster(self):
        # empty values take the defaults, as the shell's ${VAR:-default} did
        rc, err, calls = self.run_main(cluster_rc=3, EVAL_MODELS="", EVAL_KEEP="1", EVAL_TARGET=".85")
        self.assertEqual((3, ""), (rc, err))
        (args, kw), = calls
        self.assertEqual(("experiments.eval", ["--inside", "--results", self.out]), args[:2])
        self.assertEqual("4", args[2]["TULA_MAX_NODES"])
        self.assertTrue(kw["keep"])
        self.assertFalse(os.path.exists(self.out))  # a failed measurement writes no report
        with mock.patch.dict(os.environ, {"TULA_BUILD_DIR": self.build, "EVAL_TARGET": "0.85", "EVAL_LIMIT_TRAIN": "6400"}), \
                mock.patch.object(ev.shutil, "which", lambda name: "/usr/bin/" + name):
            s = ev.settings()
        self.assertEqual((["lenet5"], 4, 6400, "0.85", ["1", "0.5", "0.25"]),
                         (s["models"], s["epochs"], s["limit_train"], s["target"], s["tune_lr"]))


class Scripts(unittest.TestCase):
    def test_trainer_args(self):
        self.assertEqual("--model lenet5 --data fashion-mnist --epochs 4 --optimizer auto", ev.trainer_args("lenet5", 4, 0))
        self.assertEqual("--model m --data fashion-mnist --epochs 2 --limit-train 6400 --batch-size 64 --lr-scaling linear",
                         ev.trainer_args("m", 2, 6400, 64))
        self.assertEqual("--model m --data fashion-mnist --epochs 2 --batch-size 512 --lr-scaling linear --optimizer sgd --lr 0.1",
                         ev.trainer_args("m", 2, 0, 512, ["--optimizer", "sgd", "--lr", "0.1"]))

    def test_template_is_the_example_job(self):
        """The template runs the example's mpirun line, and with the example's arguments (12 epochs,
        run (a)) its tula-train line is the example's plus --summary."""
        with open(ev.TEMPLATE) as f:
            template = f.read()
        with open(os.path.join(REPO, "examples", "fashion-mnist.sbatch")) as f:
            example = f.read()
        mpirun = [line for line in example.splitlines() if line.startswith("mpirun ")]
        self.assertEqual(1, len(mpirun))
        self.assertIn(mpirun[0], template.splitlines())
        self.assertIn("export SLURM_EXPORT_ENV=ALL", template.splitlines())
        args = ev.trainer_args("lenet5", 12, 0)
        self.assertIn("    tula-train " + args + "\n", example)
        text = ev.fill_template(template, "eval-lenet5-auto", "/w/lenet5-auto-%j.out", args, "/w/s-$SLURM_JOB_ID.jsonl")
        self.assertIsNone(ev.script_problem(text, "eval-lenet5-auto", "/w/lenet5-auto-%j.out", args, "/w/s-$SLURM_JOB_ID.jsonl"))
        self.assertIn('    tula-train %s --summary "/w/s-$SLURM_JOB_ID.jsonl"\n' % args, text)
        self.assertEqual((args, "/w/s-$SLURM_JOB_ID.jsonl"), ev.trainer_line(text))

    def test_script_problems(self):
        t = "#SBATCH --job-name=@JOB_NAME@\n#SBATCH --output=@OUTPUT@\n@OTHER@\n  tula-train @TRAINER_ARGS@ --summary \"@SUMMARY@\"\n"
        text = ev.fill_template(t, "j", "o", "--model a", "s")
        self.assertIn("@OTHER@", ev.script_problem(text, "j", "o", "--model a", "s"))
        text = text.replace("@OTHER@\n", "")
        self.assertIsNone(ev.script_problem(text, "j", "o", "--model a", "s"))
        self.assertIn("tula-train line", ev.script_problem(text, "j", "o", "--model b", "s"))
        self.assertIn("--output=p", ev.script_problem(text, "j", "p", "--model a", "s"))
        self.assertIsNone(ev.trainer_line(text + text))  # two tula-train lines: not the script meant

    def test_written_and_checked(self):
        with tempfile.TemporaryDirectory() as d:
            e = ev.Evaluation({"epochs": 3, "limit_train": 0, "models": ["lenet5"]}, d)
            path, args = e.script("lenet5", "small", 64)
            self.assertEqual(os.path.join(d, "eval", "lenet5-small.sbatch"), path)
            text = tb.read_text(path)
            self.assertIn("#SBATCH --job-name=eval-lenet5-small\n", text)
            self.assertIn("#SBATCH --output=%s\n" % os.path.join(d, "eval", "lenet5-small-%j.out"), text)
            self.assertEqual((args, os.path.join(d, "eval", "lenet5-small-$SLURM_JOB_ID.summary.jsonl")), ev.trainer_line(text))
            self.assertEqual("--model lenet5 --data fashion-mnist --epochs 3 --batch-size 64 --lr-scaling linear", args)
            e.template = e.template.replace("@TRAINER_ARGS@", "@TRAINER_ARGS@ --epochs 9")
            with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
                e.script("lenet5", "small", 64)


def cand(k, r, b, e, partition, secs, nh):
    """A candidate of `tula plan --format json` (cli/format.cpp, candidate_json), the fields read here."""
    return {"nodes": k, "ranks_per_node": r, "global_batch": b, "epochs": e, "partition": partition, "total_seconds": secs,
            "node_hours": nh}


PLAN = {"workload": "lenet5@fashion-mnist", "epochs": 4, "chosen": 1, "price_per_node_hour": 1.0, "noise_scale": 1016.43,
        "noise_scale_source": "measured", "accuracy_excluded": 0, "reason": "knee | cheapest",
        "candidates": [cand(1, 1, 64, 4, "", 90.0, 0.025), cand(2, 2, 256, 5, "cpu", 60.0, 0.0333),
                       cand(4, 1, 512, 6, "cpu", 50.0, 0.0556), cand(4, 1, 256, 5, "cpu", 55.0, 0.0611),
                       cand(1, 1, 32, 4, "", 120.0, 0.0333)]}


class Readers(unittest.TestCase):
    def test_plan_json(self):
        self.assertEqual(512, ev.largest_batch(PLAN, 4))
        self.assertIsNone(ev.largest_batch(PLAN, 3))
        self.assertEqual(((2, 2, 256, 5), "cpu"), ev.planned(PLAN))
        self.assertEqual(((1, 1, 64, 4), None), ev.planned(dict(PLAN, chosen=0)))
        d = ev.plan_digest(PLAN)
        self.assertEqual((2, 256, 1016.43, "measured", 1.0), (d["nodes"], d["global_batch"], d["noise_scale"],
                                                              d["noise_scale_source"], d["price_per_node_hour"]))
        runs = ev.simulated_runs(PLAN)
        self.assertEqual([("(a) Tula", 2, 256), ("(b) 4 nodes, largest batch", 4, 512), ("(c) 1 node, smallest batch", 1, 32)],
                         [(r["run"], r["nodes"], r["global_batch"]) for r in runs])
        self.assertEqual({"run", "nodes", "global_batch", "total_seconds", "node_hours"}, set(runs[0]))

    def test_text_readers(self):
        self.assertEqual(0.025, ev.base_lr("  --lr FLOAT=0.025        base learning rate\n"))
        self.assertEqual(ev.BASE_LR, ev.base_lr("no such option\n"))
        log = "profile compute: round spread 9.0 % (the rounds')\nprofile compute: round spread 13.5 % (...)\n"
        self.assertEqual(13.5, tb.round_spread(log))
        self.assertIsNone(tb.round_spread("nothing\n"))

    def test_run_summary(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "s.jsonl")
            with open(p, "w") as f:
                f.write('{"type":"run","nodes":1}\n{"type":"epoch","seconds":9}\n'  # an earlier part
                        '{"type":"run","nodes":2,"ranks":4}\n{"type":"epoch","seconds":1.5,"test_accuracy":0.8}\nnot json\n'
                        '{"type":"summary","train_seconds":1.5}\n')
            r = tb.run_summary(p)
            self.assertEqual(({"type": "run", "nodes": 2, "ranks": 4}, 1, 1.5), (r["run"], len(r["epochs"]), r["summary"]["train_seconds"]))
            with open(p, "w") as f:
                f.write('{"type":"run","nodes":1}\n{"type":"epoch","seconds":9}\n')
            self.assertIsNone(tb.run_summary(p))
            self.assertIsNone(tb.run_summary(os.path.join(d, "none")))


class JobRow(unittest.TestCase):
    """A finished job's row: its shape, times and accuracies from tula-train's summary file, the
    prediction kept only for the shape it was made for."""

    def job(self, d, shape, summary=True):
        e = ev.Evaluation({"epochs": 2, "limit_train": 0, "models": ["lenet5"]}, d)
        script, args = e.script("lenet5", "auto")
        if summary:
            with open(os.path.join(d, "eval", "lenet5-auto-17.summary.jsonl"), "w") as f:
                for o in ({"type": "run", "workload": "lenet5@fashion-mnist", "nodes": 2, "ranks": 4, "global_batch": 128,
                           "epochs": 2, "optimizer": "sgd", "host": "n1"},
                          {"type": "epoch", "epoch": 1, "test_accuracy": 0.81, "seconds": 10.5},
                          {"type": "epoch", "epoch": 2, "test_accuracy": 0.86, "seconds": 9.5},
                          {"type": "summary", "train_seconds": 20.0, "test_accuracy": 0.86, "epochs_trained": 2}):
                    f.write(json.dumps(o) + "\n")
        with mock.patch.object(tb, "submit", lambda a: "17"), \
                mock.patch.object(hole, "job_fields", lambda j: {"NumNodes": "2", "TimeLimit": "00:05:00"}), \
                mock.patch.object(hole, "wait_all", lambda jobs, limit, say: {"17": {"JobState": "COMPLETED", "RunTime": "00:00:31"}}), \
                contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return e.job("lenet5", "tula", ["--tula=auto"], script, args, "sbatch --tula=auto lenet5-auto.sbatch", shape, 21.0), e

    def test_row(self):
        with tempfile.TemporaryDirectory() as d:
            row, e = self.job(d, (2, 2, 128, 2))
            self.assertEqual([row], e.rows)
            self.assertEqual((17, 2, 2, 128, 2, "sgd", "n1"), (row["job"], row["nodes"], row["ranks_per_node"], row["global_batch"],
                                                             row["epochs"], row["optimizer"], row["host"]))
            self.assertEqual((21.0, 20.0, 0.86, [[10.5, 0.81], [9.5, 0.86]], 31, "COMPLETED"),
                             (row["predicted_seconds"], row["measured_seconds"], row["test_accuracy"], row["curve"],
                              row["wall_seconds"], row["state"]))
            self.assertEqual(("sbatch --tula=auto lenet5-auto.sbatch", "--model lenet5 --data fashion-mnist --epochs 2 --optimizer auto"),
                             (row["command"], row["trainer_args"]))
            self.assertEqual(["sbatch --tula=auto lenet5-auto.sbatch   # job 17"], e.commands)
            row, _ = self.job(d, (2, 1, 128, 2))  # predicted for 1 rank a node, ran 2
            self.assertIsNone(row["predicted_seconds"])

    def test_no_summary(self):
        with tempfile.TemporaryDirectory() as d:
            row, e = self.job(d, (2, 2, 128, 2), summary=False)
            self.assertIsNone(row)
            self.assertEqual([], e.rows)


def rows_and_manifest():
    """lenet5's rows and manifest; the figures the tests expect are computed by hand in Report."""
    def row(arm, k, b, secs, acc, pred, curve, wall=None, **more):
        return dict(study="eval", model="lenet5", arm=arm, job=len(arm), nodes=k, ranks_per_node=1, global_batch=b,
                    epochs=4, optimizer="sgd", predicted_seconds=pred, measured_seconds=secs, test_accuracy=acc,
                    curve=curve, wall_seconds=wall, trainer_args="--model lenet5 (%s)" % arm, **more)
    rows = [row("tune", 4, 512, 40.0, 0.87, None, [], lr_mult=1.0, lr=0.05, val_accuracy=0.87),
            row("tune", 4, 512, 40.0, 0.88, None, [], lr_mult=0.5, lr=0.025, val_accuracy=0.89),
            row("tune", 4, 512, 40.0, 0.88, None, [], lr_mult=0.25, lr=0.0125, val_accuracy=0.89),
            row("tula", 1, 64, 100.0, 0.90, 80.0, [[20, 0.85], [20, 0.886], [30, 0.895], [30, 0.90]], 110),
            row("large", 4, 512, 40.0, 0.88, 50.0, [[10, 0.80], [10, 0.85], [10, 0.87], [10, 0.88]], 62),
            row("small", 1, 64, 120.0, 0.895, 125.0, [[30, 0.86], [30, 0.885], [30, 0.89], [30, 0.895]], 123),
            row("tula-again", 1, 64, 90.0, 0.90, 99.0, [[45, 0.88], [45, 0.90]], 100),
            dict(model="lenet5", arm="hole-with", job=30, state="COMPLETED", measured_seconds=400.0, first_start_seconds=0.4,
                 parts=2, test_accuracy=0.8828),
            dict(model="lenet5", arm="hole-without", job=31, state="COMPLETED", measured_seconds=500.0, first_start_seconds=262.0,
                 parts=1, test_accuracy=None)]
    plan = {"nodes": 1, "global_batch": 64, "noise_scale": 1016.43, "noise_scale_source": "measured", "accuracy_excluded": 0,
            "reason": "knee | cheapest", "price_per_node_hour": 1.0}
    manifest = {"made_at": "2026-01-02 03:04 UTC", "seconds": 1544, "uname": "Linux 6.1 x86_64", "cores": 2, "cpu": "AMD EPYC",
                "load_average": "0.68 1.09 2.37", "testbed": "isolated", "link_rate": "200mbit", "models": ["lenet5"],
                "epochs": 4, "limit_train": 0, "train_images": 60000, "target": None, "eval_out": None,
                "per_model": {"lenet5": {"big_batch": 512, "profile_noise_percent": 8.0, "plan_before": plan, "plan_after": plan}},
                "simulation": {"status": "ok", "hardware_file": "/x/hardware-h100-512.json", "workload": "resnet50@imagenet",
                               "epochs": 90, "hardware": "cluster h100-512",
                               "runs": [{"run": "(a) Tula", "nodes": 16, "global_batch": 8192, "total_seconds": 143.14, "node_hours": 0.636}]},
                "hole": {"status": "ok", "plan": {"hole": "starts in a hole"}, "time_min_minutes": 3, "hole_seconds": 200,
                         "reservation_minutes": 1, "partition": "cpu", "trainer_args": "--model lenet5"},
                "commands": ["tula profile allreduce --nodes 2,3,4 --db $CLUSTER/system.db"]}
    return rows, manifest


class Report(unittest.TestCase):
    def test_figures(self):
        rows, manifest = rows_and_manifest()
        # the target: (c)'s 0.895 minus 1 point
        self.assertEqual("0.8850", er.target_text(rows, manifest, "lenet5"))
        self.assertEqual("0.85", er.target_text(rows, dict(manifest, target="0.85"), "lenet5"))
        # (a) reaches 0.885 in its second epoch, after 20 + 20 s; (b) never; (c) in its second, 30 + 30 s
        self.assertEqual([40, None, 60], [er.time_to_target(er.arm_row(rows, "lenet5", a), 0.885) for a in ("tula", "large", "small")])
        self.assertIs(rows[1], er.best_tune(rows, "lenet5"))  # 0.89 first at multiplier 0.5
        self.assertEqual("143.1 0.636 16 0", " ".join(er.trim(x, p) for x, p in ((143.14, 1), (0.636, 4), (16.0, 1), (0.0, 2))))

    def test_report(self):
        rows, manifest = rows_and_manifest()
        text = er.report(rows, manifest)
        lines = text.splitlines()
        # (a): error (100 - 80) / 100 = +20 %; 100 s x 1 node / 3600 = 0.02778 node-hours, predicted 80 / 3600 = 0.02222
        self.assertIn("| lenet5 | (a) Tula auto | 1 | 64 | sgd |"
                      " 40.00 | 0.9000 | 100.00 | 80.0 | +20.0 % | 0.02778 | 0.02222 | +20.0 % | 110 |", lines)
        # (b): (40 - 50) / 40 = -25 %; 40 x 4 / 3600 = 0.04444, 50 x 4 / 3600 = 0.05556
        self.assertIn("| lenet5 | (b) large batch | 4 | 512 | sgd |"
                      " not reached | 0.8800 | 40.00 | 50.0 | -25.0 % | 0.04444 | 0.05556 | -25.0 % | 62 |", lines)
        # (c): (120 - 125) / 120 = -4.2 %; 120 / 3600 = 0.03333, 125 / 3600 = 0.03472
        self.assertIn("| lenet5 | (c) small batch | 1 | 64 | sgd |"
                      " 60.00 | 0.8950 | 120.00 | 125.0 | -4.2 % | 0.03333 | 0.03472 | -4.2 % | 123 |", lines)
        # (a'): 0.88 after its first epoch is below 0.885, so 45 + 45 s; (90 - 99) / 90 = -10 %
        self.assertIn("| lenet5 | (a') Tula auto again | 1 | 64 | sgd |"
                      " 90.00 | 0.9000 | 90.00 | 99.0 | -10.0 % | 0.02500 | 0.02750 | -10.0 % | 100 |", lines)
        self.assertIn("| lenet5 | 1 | 0.05 | 0.8700 |  |", lines)
        self.assertIn("| lenet5 | 0.5 | 0.025 | 0.8900 | yes |", lines)
        self.assertIn("| lenet5 | 0.25 | 0.0125 | 0.8900 |  |", lines)
        # spread |100 - 90| / 95 = 10.5 %, 20 / 10.526 = 1.90; profile noise 20 / 8 = 2.50
        self.assertIn("- lenet5: reaches 0.8850 first: yes; accuracy within 1 point of (c): yes (0.9000 vs 0.8950); prediction within "
                      "5 %: no (20.0 %); the next submission (a'), planned with the three runs in the history: prediction within "
                      "5 %: no (10.0 %); anchor: (a) and (a') ran the same job (1 x 64), 100.00 s and 90.00 s: a run-to-run spread "
                      "of 10.5 % on this machine (ratio of (a)'s prediction error to it: 1.90); profile noise: the one-node "
                      "profile's rounds differ by 8.0 % (median over batch sizes of (max - min) / median) (ratio of (a)'s "
                      "prediction error to it: 2.50)", lines)
        self.assertIn("| lenet5 | 1 x 64 | 1 x 64 | 1016.4 (measured) | 0 | knee / cheapest |", lines)
        self.assertIn("SIMULATED (no job ran): tula plan --hardware hardware-h100-512.json: resnet50@imagenet, 90 epochs, cluster h100-512.", lines)
        self.assertIn("| resnet50@imagenet | (a) Tula | 16 | 8192 | 143.1 | 0.636 |", lines)
        self.assertIn("| with `--tula-time-min=yes` | 0 | 2 | 400 | 0.8828 | COMPLETED |", lines)
        self.assertIn("| without (`--tula-time-min=no`) | 262 | 1 | 500 | n/a | COMPLETED |", lines)
        self.assertIn("    EVAL_MODELS=\"lenet5\" EVAL_EPOCHS=4 EVAL_LIMIT_TRAIN=0 make eval", lines)
        self.assertIn("    lenet5-large: tula-train --model lenet5 (large)", lines)
        self.assertIn("global batch of tula.conf's global_batches that tula plan finds feasible on 4 nodes (lenet5 512);", lines)
        self.assertIn("namespace with a 200mbit tbf-shaped link and a 0.3-core CPU quota (partition cpu, 4 nodes);", lines)
        self.assertIn("![test accuracy vs training wall time, lenet5](eval-lenet5.png)", lines)
        for title in ("## Measured on the local cluster", "## The plan again, after these runs", "## Simulated: 512-node GPU cluster",
                      "## Measured: a queue with a hole (time_min)", "## Commands"):
            self.assertIn(title, lines)

    def test_sections_not_run(self):
        rows, manifest = rows_and_manifest()
        manifest = dict(manifest, simulation={"status": "unavailable"}, hole={"status": "not-run"},
                        per_model={"lenet5": dict(manifest["per_model"]["lenet5"], plan_after=None)})
        text = er.report([r for r in rows if r["arm"] != "tula-again"], manifest)
        self.assertIn("simulation: not available in this build (tula plan has no --hardware FILE option).", text)
        self.assertIn("not run: it trains lenet5, which is not in EVAL_MODELS.", text)
        self.assertIn("| lenet5 |  | tula plan failed (see the eval log) |  |  |  |", text)
        self.assertNotIn("(a') Tula auto again", text)
        self.assertIn("not measured: experiments.hole failed", er.report(rows, dict(manifest, hole={"status": "failed"})))

    def test_from_rows(self):
        rows, manifest = rows_and_manifest()
        with tempfile.TemporaryDirectory() as d:
            tb.write_results(d, rows, manifest)
            with mock.patch.object(er.shutil, "which", lambda name: None), contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(0, ev.main(["--from-rows", "--results", d]))
            text = tb.read_text(os.path.join(d, "report.md"))
            self.assertIn("| lenet5 | (a) Tula auto | 1 | 64 |", text)
            self.assertNotIn("eval-lenet5.png", text)  # no gnuplot here, no figure from before


if __name__ == "__main__":
    unittest.main()
