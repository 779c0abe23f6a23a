"""The testbed reports (experiments.testbed_report, first_run_report, ranks_report) and their shared
module (experiments.testbed): the readers of tula's and tula-train's outputs on fabricated text,
and each report written from fabricated rows with hand-computed figures; the extrapolation check's
pruning of a profile database on a file made with libtula's own schema statements; and every
committed report of these studies that has its rows (runs.jsonl) regenerated from them, byte for
byte."""

import contextlib
import io
import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from experiments import first_run_report as frr
from experiments import ranks_report as rr
from experiments import testbed as tb
from experiments import testbed_report as tbr

from committed import assert_regenerated

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MANIFEST = {"made_at": "2026-01-02 03:04 UTC", "seconds": 1234, "uname": "Linux 6.1 x86_64", "cores": 2}


class Readers(unittest.TestCase):
    def test_allreduce_log(self):
        log = ("tula-train: profile allreduce: 2 ranks, 1048576 bytes: 50.912 ms (20 iters)\n"
               "tula-train: profile allreduce: 4 ranks, 8388608 bytes: 634.000 ms (20 iters)\n"
               "profile allreduce: fit (ring, the smaller residual) alpha = 9143.32 us per step,"
               " beta = 44.3673 ns per byte (rmse 1.234 ms)\n")
        self.assertEqual(tb.allreduce_samples(log), [(2, 1048576, 50.912), (4, 8388608, 634.0)])
        self.assertEqual(tb.allreduce_fit(log), ("ring", 9143.32, 44.3673))
        self.assertIsNone(tb.allreduce_fit("nothing"))

    def test_kv_done_and_numbers(self):
        self.assertEqual(tb.kv("nodes=2\nglobal_batch=256\nnodes=3\nno line\n"), {"nodes": "2", "global_batch": "256"})
        out = ("tula-train: done: train_seconds=12.50 test_accuracy=0.8 global_batch=32 nodes=1 ranks=1 epochs=2\n"
               "tula-train: done: train_seconds=21.30 test_accuracy=0.8 global_batch=32 nodes=1 ranks=1 epochs=2\n")
        self.assertEqual(tb.done_train_seconds(out), 21.3)
        self.assertIsNone(tb.done_train_seconds("tula-train: training diverged\n"))
        self.assertEqual([tb.number(x) for x in ("7", "21.0", "", None, "x")], [7, 21.0, None, None, None])

    def test_json_outputs(self):
        doc = {"workloads": [{"workload": "lenet5@fashion-mnist", "held_out": [
            {"kind": "run", "nodes": 2, "ranks_per_node": 1, "global_batch": 256, "measured_epoch_seconds": 4.0,
             "predicted_epoch_seconds": 3.9, "measured_cost": 0, "predicted_cost": 0},
            {"kind": "compute", "nodes": 1, "ranks_per_node": 1, "global_batch": 32, "measured_epoch_seconds": 1.0,
             "predicted_epoch_seconds": 1.0}]}]}
        self.assertEqual(tb.validate_runs(doc), [{"workload": "lenet5@fashion-mnist", "nodes": 2, "ranks_per_node": 1,
                                                  "global_batch": 256, "measured_epoch_seconds": 4.0,
                                                  "predicted_epoch_seconds": 3.9}])
        self.assertEqual(tb.validate_runs(None), [])
        self.assertEqual(tb.predicted_seconds({"predicted_seconds": 4.02}), 4.02)
        self.assertIsNone(tb.predicted_seconds(None))
        with tempfile.TemporaryDirectory() as d:
            m = os.path.join(d, "m.jsonl")
            with open(m, "w") as f:
                f.write('{"type":"epoch","seconds":4.5}\n{"type":"step"}\nnot json\n{"type":"epoch","seconds":4.18}\n')
            self.assertEqual(tb.last_epoch_seconds(m), 4.18)
            self.assertIsNone(tb.last_epoch_seconds(os.path.join(d, "none")))
            self.assertIsNone(tb.read_json(m))

    def test_md_table(self):
        self.assertEqual(tb.md_table(("a", "b"), "lr", [(1, "x")]), ["| a | b |", "| --- | ---: |", "| 1 | x |"])
        self.assertEqual(tb.md_table(("a", "b"), "rr", [], compact=True), ["| a | b |", "|---:|---:|"])


class Ranks(unittest.TestCase):
    ROWS = [{"nodes": 2, "ranks_per_node": 2, "global_batch": 768, "measured_epoch_seconds": 4.0, "predicted_epoch_seconds": 3.92},
            {"nodes": 1, "ranks_per_node": 2, "global_batch": 192, "measured_epoch_seconds": 2.0, "predicted_epoch_seconds": 2.08},
            {"nodes": 1, "ranks_per_node": 1, "global_batch": 192, "measured_epoch_seconds": 3.0, "predicted_epoch_seconds": 3.3}]

    def test_report(self):
        text, summary = rr.report(self.ROWS, dict(MANIFEST, within_node_allreduce="yes, 2 ranks on one node"))
        lines = text.splitlines()
        # sorted by ranks per node, nodes, batch; errors 10 %, 4 % and 2 %; the MAPE of the
        # 2-rank runs (4 + 2) / 2 = 3 %
        i = lines.index("|---:|---:|---:|---:|---:|---:|")
        self.assertEqual(lines[i + 1:i + 4], ["| 1 | 1 | 192 | 3.00 | 3.30 | 10.0 |", "| 1 | 2 | 192 | 2.00 | 2.08 | 4.0 |",
                                              "| 2 | 2 | 768 | 4.00 | 3.92 | 2.0 |"])
        self.assertEqual(lines[-1], "MAPE of the 2 runs with 2 ranks per node: **3.0 %** (target: at most 5 %; meets it).")
        self.assertIn("on 2026-01-02:", lines[2])
        self.assertIn("within-node allreduce profiled: yes, 2 ranks on one node.", text)
        self.assertEqual(summary, "2 runs with 2 ranks per node, MAPE 3.0 % (meets the 5 % target)")
        worse = [dict(r, predicted_epoch_seconds=r["measured_epoch_seconds"] * 1.5) for r in self.ROWS]
        self.assertIn("**50.0 %** (target: at most 5 %; misses it)", rr.report(worse, dict(MANIFEST, within_node_allreduce="no"))[0])

    def test_from_rows(self):
        with tempfile.TemporaryDirectory() as d:
            tb.write_results(os.path.join(d, "res"), self.ROWS, dict(MANIFEST, within_node_allreduce="no"))
            out = os.path.join(d, "r.md")
            with contextlib.redirect_stdout(io.StringIO()) as said:
                self.assertEqual(rr.main(["--from-rows", "--results", os.path.join(d, "res"), "--out", out]), 0)
            self.assertIn("MAPE 3.0 %", said.getvalue())
            with open(out) as f:
                self.assertEqual(f.read(), rr.report(self.ROWS, dict(MANIFEST, within_node_allreduce="no"))[0])


class FirstRun(unittest.TestCase):
    def row(self, run, job, pred, meas):
        return {"model": "lenet5", "run": run, "job": job, "nodes": 1, "global_batch": 32, "epochs": 2,
                "predicted_seconds": pred, "measured_seconds": meas}

    def test_report(self):
        rows = [self.row(1, 9, 20.0, 20.0), self.row(2, 15, 18.0, 20.0), self.row(3, 21, 22.0, 21.0),
                {"model": "lenet5", "run": "anchor", "job": 22, "nodes": 1, "global_batch": 32, "epochs": 2,
                 "planned_seconds": 21.0, "measured_seconds": 19.0},
                dict(self.row(1, 41, 57.7, 53.3), model="fmnist-cnn", global_batch=64)]
        lines = frr.report(rows, MANIFEST).splitlines()
        self.assertIn("on 2026-01-02. Each run", lines[2])
        i = lines.index("## lenet5")
        # errors (20 - 20) / 20, (20 - 18) / 20 = +10 %, (21 - 22) / 21 = -4.76 %: 2 within 5 %
        self.assertEqual(lines[i + 4:i + 7], ["| 1 | 9 | 1 | 32 | 2 | 20.0 | 20.0 | +0.0 |",
                                              "| 2 | 15 | 1 | 32 | 2 | 18.0 | 20.0 | +10.0 |",
                                              "| 3 | 21 | 1 | 32 | 2 | 22.0 | 21.0 | -4.8 |"])
        self.assertEqual(lines[i + 8], "Within 5 %: **2 of 3** runs (target: at least 4 of 5).")
        # the anchor: |21 - 19| / 20 = 10 %; the 4 jobs 19, 20, 20, 21: median 20, (21 - 19) / 20 =
        # 10 %; the median is within 5 % of 20, 20 and 21 (4.76 %)
        self.assertEqual(lines[i + 9], "Anchor: the last planned job (1 nodes x 32, 2 epochs) again without Tula, job 22: "
                                       "19.0 s against 21.0 s, a spread of 10.0 % between identical jobs.")
        self.assertEqual(lines[i + 10], "The 4 jobs of that shape (the anchor included) did the same work: 19.0 to 21.0 s,"
                                        " median 20.0 s, a spread (max - min) / median of 10.0 %. A prediction of that median"
                                        " for every run would be within 5 % in 3 of its 3 runs.")
        j = lines.index("## fmnist-cnn")
        self.assertEqual(lines[j + 4], "| 1 | 41 | 1 | 64 | 2 | 57.7 | 53.3 | -8.3 |")
        self.assertEqual(lines[j + 6], "Within 5 %: **0 of 1** runs (target: at least 4 of 5).")

    def test_job_script(self):
        with open(os.path.join(REPO, "examples", "fashion-mnist.sbatch")) as f:
            text = f.read()
        s = frr.sub_first(r"--model lenet5", "--model fmnist-cnn", text)
        s = frr.sub_first(r"--epochs 12", "--epochs 2 --limit-train 6400 --limit-test 2000", s)
        s = frr.sub_first(r"^#SBATCH --job-name=.*", "#SBATCH --job-name=first-fmnist-cnn", s)
        self.assertIn("tula-train --model fmnist-cnn --data fashion-mnist --epochs 2 --limit-train 6400 --limit-test 2000"
                      " --optimizer auto\n", s)
        self.assertIn("#SBATCH --job-name=first-fmnist-cnn\n", s)
        self.assertEqual(s.count("\n"), text.count("\n"))

    def test_bad_count(self):
        old = os.environ.get("FIRST_RUNS")
        os.environ["FIRST_RUNS"] = "100"
        try:
            with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit) as e:
                frr.settings()
            self.assertEqual(e.exception.code, 2)
            self.assertIn("FIRST_RUNS='100' is not a count from 1 to 99", err.getvalue())
        finally:
            if old is None:
                del os.environ["FIRST_RUNS"]
            else:
                os.environ["FIRST_RUNS"] = old


class Testbed(unittest.TestCase):
    def rows(self):
        r = tbr.row
        rows = [r("allreduce", cluster="profile", nodes=2, bytes=1048576, ms=50.0),
                r("allreduce", cluster="profile", nodes=2, bytes=2097152, ms=90.0),
                r("allreduce", cluster="plan", link_rate="100mbit", nodes=2, bytes=2097152, ms=180.0),
                r("allreduce-fit", cluster="profile", algorithm="ring", alpha_us=1000.0, beta_ns=40.0),
                r("variant", setting="1 TCP link per pair", nodes=2, bytes=2097152, ms=175.4),
                r("concurrency", model="lenet5", ranks=2, local_batch=16, factor=0.634),
                r("concurrency", model="lenet5", ranks=2, local_batch=32, factor=0.75),
                r("concurrency", model="lenet5", ranks=3, local_batch=16, factor=1.0),
                r("step-factor", model="lenet5", nodes=2, local_batch=32, time_factor=1.594)]
        for rate, n in (("100mbit", 2), ("200mbit", 1), ("400mbit", 2)):
            rows.append(r("plan", model="lenet5", link_rate=rate, nodes=n, global_batch=256, predicted_seconds=184.1,
                          node_hours=0.0511))
        for rate, n in (("100mbit", 1), ("200mbit", 2), ("400mbit", 2)):
            rows.append(r("plan", model="fmnist-cnn", link_rate=rate, nodes=n, global_batch=512, predicted_seconds=3547.6,
                          node_hours=1.9709))
        rows += [r("plan-candidate", model="lenet5", link_rate="100mbit", nodes=4, global_batch=512, pareto=True,
                   time_to_target_seconds=160.6, cost_to_target=0.1784),
                 r("plan-candidate", model="lenet5", link_rate="100mbit", nodes=2, global_batch=64, pareto=False,
                   time_to_target_seconds=300.0, cost_to_target=0.2),
                 r("plan-candidate", model="lenet5", link_rate="100mbit", nodes=1, global_batch=32, pareto=True,
                   time_to_target_seconds=184.1, cost_to_target=0.0511),
                 r("scaling", model="lenet5", nodes=2, global_batch=256, examples=12800, measured_epoch_seconds=4.0,
                   predicted_epoch_seconds=3.9),
                 r("scaling", model="lenet5", nodes=4, global_batch=64, examples=12800, measured_epoch_seconds=12.57,
                   predicted_epoch_seconds=None)]
        for change, m, p in (("defaults", 10.0, 11.0), ("defaults", 10.0, 8.0), ("without=concurrency", 4.0, 4.2)):
            rows.append(r("validate", change=change, workload="lenet5@fashion-mnist", nodes=2, ranks_per_node=1,
                          global_batch=256, measured_epoch_seconds=m, predicted_epoch_seconds=p))
        return rows

    def manifest(self):
        return dict(MANIFEST, link_rate="200mbit", rates=["100mbit", "200mbit", "400mbit"], models=["lenet5", "fmnist-cnn"])

    def test_link(self):
        # 8e9 / 200e6 x 1514 / 1448 = 41.82320... ns per byte, as the committed report has it
        self.assertEqual(tbr.beta_link_ns("200mbit"), 41.8232)
        self.assertEqual(tbr.rate_bps("1gbit"), 1e9)
        self.assertEqual(tbr.rate_bps("400kbit"), 4e5)
        # 6 ring steps on 4 nodes, 4 of rabenseifner; 2 x 3/4 x 1e6 bytes x 40 ns = 60 ms
        self.assertAlmostEqual(tbr.model_ms(4, 0, ("ring", 1000.0, 0.0)), 6.0)
        self.assertAlmostEqual(tbr.model_ms(4, 0, ("rabenseifner", 1000.0, 0.0)), 4.0)
        self.assertAlmostEqual(tbr.model_ms(3, 0, ("rabenseifner", 1000.0, 0.0)), 4.0)
        self.assertAlmostEqual(tbr.model_ms(4, 1000000, ("ring", 0.0, 40.0)), 60.0)

    def test_report(self):
        lines = tbr.report(self.rows(), self.manifest()).splitlines()
        self.assertIn("Written by `make testbed-report` (experiments/testbed_report.py) on 2026-01-02 03:04 UTC, 1234 s;", lines)
        self.assertIn("Linux 6.1 x86_64, 2 cores. Testbed: scripts/tula-cluster (each node its own network namespace, a", lines)
        self.assertIn("Tula's fit over these samples: ring, alpha = 1000.00 us per step, beta = 40.0000 ns per byte", lines)
        self.assertIn("headers with timestamps; tbf counts them): beta_link = 41.8232 ns per byte.", lines)
        self.assertIn("The fitted beta is 0.956 times beta_link.", lines)  # 40 / 41.8232
        # 1 MB: link 1048576 x 41.8232e-6 = 43.85 ms, model 2 + 41.94 = 43.94 ms; 2 MB: link 87.71 ms
        # (90 / 87.71 = 1.03), model 2 + 83.89 = 85.89 ms (90 / 85.89 = 1.05); only 2 MB is above 1 MB
        self.assertIn("| 2 | 1048576 | 50.0 | 43.9 | 1.14 | 43.9 | 1.14 |", lines)
        self.assertIn("| 2 | 2097152 | 90.0 | 87.7 | 1.03 | 85.9 | 1.05 |", lines)
        self.assertIn("Within 10 % above 1 MB (sizes > 1048576 bytes): of the model, 1 of 1 points; of the link, 1 of 1 points.", lines)
        self.assertIn("| 1 TCP link per pair | 2 | 2097152 | 175.4 | 2.00 |", lines)  # 175.4 / 87.71
        self.assertIn("lenet5: concurrency factors K=2: b=16 0.63, b=32 0.75; K=3: b=16 1.00", lines)
        self.assertIn("lenet5: step factors K=2 b=32 1.59", lines)
        self.assertIn("fmnist-cnn: concurrency factors none", lines)
        self.assertIn("fmnist-cnn: step factors none", lines)
        self.assertIn("| lenet5 | 100mbit | 2 | 256 | 184.1 s | 0.0511 |", lines)
        self.assertIn("| fmnist-cnn | 400mbit | 2 | 512 | 3547.6 s | 1.9709 |", lines)
        self.assertIn("- lenet5 at 100mbit: 1 x 32: 184 s, 0.051; 4 x 512: 161 s, 0.178", lines)
        self.assertFalse([x for x in lines if x.startswith("- lenet5 at 200mbit")])
        # lenet5 2, 1, 2 nodes from the slowest link up: fewer at a faster link
        self.assertIn("- lenet5: no (nodes from the slowest link to the fastest: 2 1 2)", lines)
        self.assertIn("- fmnist-cnn: yes (nodes from the slowest link to the fastest: 1 2 2)", lines)
        self.assertIn("| lenet5 | 2 | 256 | 4.00 | 3.900 | +2.5 % |", lines)  # (4 - 3.9) / 4
        self.assertIn("| lenet5 | 4 | 64 | 12.57 | nan | n/a |", lines)
        self.assertFalse([x for x in lines if x.startswith("| fmnist-cnn | 1 |")])
        # leave one out: |11 - 10| / 10 and |8 - 10| / 10, a MAPE of 15 %; |4.2 - 4| / 4 = 5 %
        i = lines.index("| corrections | runs | MAPE |")
        self.assertEqual(lines[i + 2:i + 7], ["| defaults | 2 | 15.00 % |", "| without=concurrency | 1 | 5.00 % |",
                                              "| without=synced-step | 0 | nan % |", "| without=class-scaling | 0 | nan % |",
                                              "| with=calibration | 0 | nan % |"])

    def test_without_ablation(self):
        text = tbr.report([r for r in self.rows() if r["kind"] != "validate"], self.manifest())
        self.assertNotIn("## The corrections", text)
        self.assertTrue(text.endswith("| lenet5 | 4 | 64 | 12.57 | nan | n/a |\n\n## Fit on 1-2 nodes, predict 3-4 (200mbit)\n\n"
                                      "Not measured: the rows hold no extrapolate row.\n"))

    def extrapolate_rows(self):
        r = tbr.row
        rows = [x for x in self.rows() if x["kind"] != "scaling"]
        for m, k, b, q, p in (("lenet5", 2, 256, 4.0, 3.9), ("lenet5", 4, 64, 10.0, 9.0), ("lenet5", 4, 256, 5.0, 5.5),
                              ("fmnist-cnn", 4, 64, 20.0, 19.0), ("fmnist-cnn", 4, 256, 8.0, 7.6)):
            rows.append(r("scaling", model=m, nodes=k, global_batch=b, examples=3200, measured_epoch_seconds=q,
                          predicted_epoch_seconds=p))
        for m, k, b, q, p in (("lenet5", 4, 64, 10.0, 8.0), ("lenet5", 4, 256, 5.0, 6.0), ("lenet5", 4, 1024, 4.0, 3.0),
                              ("fmnist-cnn", 4, 64, 20.0, None), ("fmnist-cnn", 4, 256, 8.0, 9.0)):
            rows.append(r("extrapolate", model=m, nodes=k, global_batch=b, measured_epoch_seconds=q, predicted_epoch_seconds=p))
        return rows

    def test_extrapolation(self):
        lines = tbr.report(self.extrapolate_rows(), self.manifest()).splitlines()
        i = lines.index("## Fit on 1-2 nodes, predict 3-4 (200mbit)")
        self.assertLess(lines.index("| lenet5 | 2 | 256 | 4.00 | 3.900 | +2.5 % |"), i)
        self.assertLess(i, lines.index("## The corrections, switched in turn (200mbit)"))
        j = lines.index("### lenet5")
        # (10 - 8) / 10, (5 - 6) / 5, (4 - 3) / 4
        self.assertEqual(lines[j + 2:j + 7], ["| nodes | global batch | measured s | predicted s | error |",
                                              "| ---: | ---: | ---: | ---: | ---: |", "| 4 | 64 | 10.00 | 8.000 | +20.0 % |",
                                              "| 4 | 256 | 5.00 | 6.000 | -20.0 % |", "| 4 | 1024 | 4.00 | 3.000 | +25.0 % |"])
        # 4 x 1024 has no scaling prediction, so it is left out of both: (20 + 20) / 2 against
        # (|9 - 10| / 10 + |5.5 - 5| / 5) / 2 = 10 %
        self.assertIn("lenet5: MAPE 20.00 % fitted on 1-2 nodes, 10.00 % fitted on all nodes; shapes with both predictions: 2.",
                      lines)
        self.assertIn("| 4 | 64 | 20.00 | nan | n/a |", lines)
        self.assertIn("| 4 | 256 | 8.00 | 9.000 | -12.5 % |", lines)
        # only 4 x 256 has both: |9 - 8| / 8 = 12.5 % against |7.6 - 8| / 8 = 5 %
        self.assertIn("fmnist-cnn: MAPE 12.50 % fitted on 1-2 nodes, 5.00 % fitted on all nodes; shapes with both predictions: 1.",
                      lines)
        # (20 + 20 + 12.5) / 3 = 17.5 %; (10 + 10 + 5) / 3 = 8.33 %
        self.assertIn("Both models: MAPE 17.50 % fitted on 1-2 nodes, 8.33 % fitted on all nodes; shapes with both predictions: 3.",
                      lines)

    def test_small_fit_allreduce(self):
        r = tbr.row
        # 2-node samples made from alpha = 1000 us, beta = 40 ns per byte: 2 alpha + n beta ms
        rows = [r("allreduce", cluster="profile", nodes=2, bytes=n, ms=2.0 + n * 40e-6) for n in (2 ** 20, 2 ** 22)]
        a, b = tbr.ring_fit(rows)
        self.assertAlmostEqual(a, 1000.0, places=6)
        self.assertAlmostEqual(b, 40.0, places=9)
        self.assertIsNone(tbr.ring_fit(rows[:1]))
        # 4 nodes, 1 MiB, measured 100 ms: the 2-node fit gives 6 x 1 ms + 1.5 x 1048576 x 40 ns
        # = 68.91456 ms, (100 - 68.91456) / 100 = +31.1 %; 8 MB on 4 nodes is above 2 MB: not shown
        rows += [r("allreduce", cluster="profile", nodes=4, bytes=2 ** 20, ms=100.0),
                 r("allreduce", cluster="profile", nodes=4, bytes=2 ** 23, ms=400.0),
                 r("allreduce", cluster="plan", nodes=4, bytes=2 ** 20, ms=1.0),
                 r("step-factor", model="lenet5", nodes=2, local_batch=32, time_factor=1.25),
                 r("step-factor", model="lenet5", nodes=4, local_batch=16, time_factor=1.75)]
        lines = tbr.small_fit_allreduce(rows)
        self.assertIn("alpha = 1000.0 us, beta = 40.00 ns per byte; on more nodes, at 2 MB and less,",
                      lines)
        self.assertIn("| 4 | 1048576 | 100.0 | 68.9 | +31.1 % |", lines)
        self.assertEqual(1, sum(1 for x in lines if x.startswith("| 4 |")))
        self.assertTrue(any("1.25 to 1.25 on 2 nodes, 1.75 to 1.75 on more" in x for x in lines))
        self.assertEqual(tbr.small_fit_allreduce([x for x in rows if x["nodes"] <= 2]), [])

    def test_extrapolation_without_predictions(self):
        rows = [x for x in self.extrapolate_rows() if x["kind"] != "extrapolate" or x["model"] == "fmnist-cnn"]
        for x in rows:
            if x["kind"] == "extrapolate":
                x["predicted_epoch_seconds"] = None
        lines = tbr.extrapolation(rows, ["lenet5", "fmnist-cnn"], "200mbit")
        self.assertNotIn("### lenet5", lines)
        self.assertIn("fmnist-cnn: MAPE n/a (no shape with both predictions).", lines)
        self.assertEqual(tbr.mape([(10.0, 8.0), (0.0, 1.0), (5.0, None)]), 20.0)
        self.assertIsNone(tbr.mape([]))

    def test_rows_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            tb.write_results(d, self.rows(), self.manifest())
            rows, manifest = tb.read_results(d)
            self.assertEqual(rows, self.rows())
            self.assertEqual(manifest, self.manifest())
            with open(os.path.join(d, "runs.jsonl")) as f:
                first = json.loads(f.readline())
            self.assertEqual(list(first), ["study", "bytes", "cluster", "kind", "ms", "nodes"])  # study, then sorted
            self.assertEqual(first["study"], "testbed-report")


def schema_db(path):
    """A profile database at path made by libtula's own statements (libtula/src/db/schema.cpp:
    version 1, then each migration, in the order of the file), in WAL mode as tula makes one."""
    with open(os.path.join(REPO, "libtula", "src", "db", "schema.cpp"), encoding="utf-8") as f:
        parts = re.findall(r'constexpr const char\* (\w+) = R"SQL\((.*?)\)SQL";', f.read(), re.S)
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = WAL")
    for _, sql in parts:
        con.executescript(sql)
    return con


def fill(con):
    """Samples and runs on 1-4 nodes: compute samples of 1-4 ranks, one rank a node, and of 2 and
    3 nodes of 2 ranks each; allreduce samples on 1 node (2 ranks) and 2-4 nodes; a run of 2
    epochs on each of 1-4 nodes; made at one time (Unix seconds), as `tula db import` wants it."""
    con.execute("INSERT INTO workload(name, model, dataset, params, train_examples, test_examples, updated)"
                " VALUES ('lenet5@fashion-mnist', 'lenet5', 'fashion-mnist', 61706, 60000, 10000, 1796000000)")
    for ranks, rpn in ((1, 1), (2, 1), (3, 1), (4, 1), (4, 2), (6, 2)):
        con.execute("INSERT INTO compute_profile(workload, host, local_batch, threads, seconds_per_iter, iters, created,"
                    " ranks, ranks_per_node) VALUES ('lenet5@fashion-mnist', 'n1', 64, 1, 0.01, 10, 1796000000, ?, ?)", (ranks, rpn))
    for nodes, rpn in ((1, 2), (2, 1), (3, 1), (4, 1)):
        con.execute("INSERT INTO allreduce_profile(host, nodes, bytes, seconds, created, ranks_per_node)"
                    " VALUES ('n1', ?, 1048576, 0.05, 1796000000, ?)", (nodes, rpn))
    for nodes in (1, 2, 3, 4):
        rid = con.execute("INSERT INTO run(job_id, workload, nodes, global_batch, epochs, predicted_seconds, measured_seconds,"
                          " test_accuracy, created) VALUES (?, 'lenet5@fashion-mnist', ?, 64, 2, 10, 11, 0.8, 1796000000)",
                          (str(nodes), nodes)).lastrowid
        for e in (1, 2):
            con.execute("INSERT INTO run_epoch(run_id, epoch, seconds) VALUES (?, ?, 5.5)", (rid, e))
    con.commit()


def contents(path):
    con = sqlite3.connect(path)
    try:
        return (sorted(con.execute("SELECT ranks, ranks_per_node FROM compute_profile")),
                sorted(con.execute("SELECT nodes, ranks_per_node FROM allreduce_profile")),
                sorted(r[0] for r in con.execute("SELECT nodes FROM run")),
                sorted(con.execute("SELECT run.nodes, run_epoch.epoch FROM run_epoch LEFT JOIN run ON run.id = run_epoch.run_id")),
                con.execute("PRAGMA user_version").fetchone()[0],
                sorted(con.execute("SELECT type, name, sql FROM sqlite_master")))
    finally:
        con.close()


def tula_binary():
    path = os.path.join(os.environ.get("TULA_BUILD_DIR") or os.path.join(REPO, "build"), "bin", "tula")
    return path if os.access(path, os.X_OK) else None


def with_tula_on_path():
    """os.environ patched so that `tula` is the build's (build/bin, or TULA_BUILD_DIR's)."""
    return mock.patch.dict(os.environ, {"PATH": os.path.dirname(tula_binary()) + os.pathsep + os.environ.get("PATH", "")})


# A stand-in for tula on PATH: `tula db` runs the real one ($REAL_TULA); `tula predict` writes its arguments, XDG_DATA_HOME and the node
# counts in each --db it was given to $FAKE_LOG and prints a prediction of nodes + batch / 1000.
FAKE_TULA = """#!%s
import json, os, sqlite3, sys
a = sys.argv[1:]
if a[:1] == ["db"]:  # tula db (the pruning): the real one
    os.execv(os.environ["REAL_TULA"], ["tula"] + a)
dbs = [a[i + 1] for i, x in enumerate(a) if x == "--db"]
seen = {}
for d in dbs:
    c = sqlite3.connect(d)
    seen[d] = [sorted({r[0] for r in c.execute("SELECT nodes FROM %%s" %% t)}) for t in ("run", "allreduce_profile")]
    c.close()
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps({"argv": a, "xdg": os.environ.get("XDG_DATA_HOME"), "seen": seen}) + "\\n")
k, b = int(a[a.index("--nodes") + 1]), int(a[a.index("--global-batch") + 1])
print(json.dumps({"predicted_seconds": k + b / 1000}))
""" % sys.executable


class Extrapolate(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    @unittest.skipUnless(tula_binary(), "no tula built")
    def test_prune(self):
        path = os.path.join(self.d, "p.db")
        con = schema_db(path)
        fill(con)
        con.close()
        before = contents(path)
        with open(os.path.join(REPO, "libtula", "include", "tula", "db.hpp"), encoding="utf-8") as f:
            version = int(re.search(r"constexpr int kSchemaVersion = (\d+);", f.read()).group(1))
        self.assertEqual(before[4], version)  # schema_db made the current schema
        # 3 and 4 ranks of one a node, 6 ranks of 2 a node (3 nodes); allreduce on 3 and 4 nodes;
        # the runs on 3 and 4 nodes and their 2 epochs each
        with with_tula_on_path():
            self.assertEqual(tbr.prune_db(path, 2), {"compute": 3, "allreduce": 2, "runs": 2, "workloads": 0})
        after = contents(path)
        self.assertEqual(after[0], [(1, 1), (2, 1), (4, 2)])
        self.assertEqual(after[1], [(1, 2), (2, 1)])
        self.assertEqual(after[2], [1, 2])
        self.assertEqual(after[3], [(1, 1), (1, 2), (2, 1), (2, 2)])  # no epoch left without its run
        self.assertEqual(after[4:], before[4:])  # the schema and its version as they were
        with with_tula_on_path():
            self.assertEqual(tbr.prune_db(path, 2), {"compute": 0, "allreduce": 0, "runs": 0, "workloads": 0})

    @unittest.skipUnless(tula_binary(), "no tula built")
    def test_copy(self):
        src, dst = os.path.join(self.d, "src.db"), os.path.join(self.d, "a", "b", "dst.db")
        con = schema_db(src)
        con.execute("PRAGMA wal_autocheckpoint = 0")
        fill(con)  # left in src's -wal file while con is open
        self.assertTrue(os.path.exists(src + "-wal"))
        with with_tula_on_path():
            self.assertTrue(tbr.copy_db(src, dst))
            con.close()
            self.assertEqual(contents(dst), contents(src))
            # a second copy replaces what dst held instead of adding to it
            self.assertTrue(tbr.copy_db(src, dst))
            self.assertEqual(contents(dst), contents(src))
            # what tula refuses is raised with its message
            with open(os.path.join(self.d, "junk.db"), "w") as f:
                f.write("not a database")
            with self.assertRaisesRegex(RuntimeError, "tula db export"):
                tbr.copy_db(os.path.join(self.d, "junk.db"), os.path.join(self.d, "junk-copy.db"))
        self.assertFalse(tbr.copy_db(os.path.join(self.d, "none.db"), os.path.join(self.d, "none-copy.db")))
        self.assertFalse(os.path.exists(os.path.join(self.d, "none.db")))
        self.assertFalse(os.path.exists(os.path.join(self.d, "none-copy.db")))

    @unittest.skipUnless(tula_binary(), "no tula built")
    def test_extrapolate(self):
        cluster, xdg, work, bindir = (os.path.join(self.d, x) for x in ("cluster", "xdg", "work", "bin"))
        for x in (cluster, os.path.join(xdg, "tula"), work, bindir):
            os.makedirs(x)
        for path in (os.path.join(cluster, "system.db"), os.path.join(xdg, "tula", "profiles.db")):
            con = schema_db(path)
            fill(con)
            con.close()
        fake = os.path.join(bindir, "tula")
        tb.write_text(fake, FAKE_TULA)
        os.chmod(fake, stat.S_IRWXU)
        out, log = os.path.join(work, "rows.jsonl"), os.path.join(self.d, "log.jsonl")
        for k, b, q in ((2, 64, 3.0), (4, 64, 5.0), (4, 256, 4.0)):
            tb.append_row(out, tbr.row("scaling", model="lenet5", nodes=k, global_batch=b, examples=12800,
                                       measured_epoch_seconds=q, predicted_epoch_seconds=1.0))
        env = {"TULA_CLUSTER_DIR": cluster, "XDG_DATA_HOME": xdg, "FAKE_LOG": log, "REAL_TULA": tula_binary(),
               "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
        with mock.patch.dict(os.environ, env), contextlib.redirect_stdout(io.StringIO()):
            tbr.extrapolate(work, out)
            self.assertEqual(os.environ["XDG_DATA_HOME"], xdg)
        rows = [r for r in tb.rowsmod.read_rows(out) if r["kind"] == "extrapolate"]
        self.assertEqual(rows, [tbr.row("extrapolate", model="lenet5", nodes=4, global_batch=64, measured_epoch_seconds=5.0,
                                        predicted_epoch_seconds=4.064),
                                tbr.row("extrapolate", model="lenet5", nodes=4, global_batch=256, measured_epoch_seconds=4.0,
                                        predicted_epoch_seconds=4.256)])
        calls = tb.rowsmod.read_rows(log)
        self.assertEqual(len(calls), 2)
        a = calls[0]["argv"]
        dbs = [a[i + 1] for i, x in enumerate(a) if x == "--db"]
        self.assertEqual(len(dbs), 2)
        self.assertTrue(all(d.startswith(work + os.sep) for d in dbs))
        self.assertEqual(dbs[1], os.path.join(calls[0]["xdg"], "tula", "profiles.db"))
        for d in dbs:
            self.assertEqual(calls[0]["seen"][d], [[1, 2], [1, 2]])  # runs, allreduce samples
        conf = tb.read_text(a[a.index("--conf") + 1])
        self.assertIn("system_db = %s\n" % dbs[0], conf)
        self.assertEqual(a[a.index("--workload"):], ["--workload", "lenet5@fashion-mnist", "--nodes", "4", "--global-batch", "64",
                                                     "--epochs", "1", "--limit-train", "12800", "--format", "json"])
        # the originals keep their 3-4-node rows
        self.assertEqual(contents(os.path.join(xdg, "tula", "profiles.db"))[2], [1, 2, 3, 4])
        self.assertEqual(contents(os.path.join(cluster, "system.db"))[2], [1, 2, 3, 4])

    @unittest.skipUnless(tula_binary(), "no build/bin/tula (TULA_BUILD_DIR)")
    def test_tula_reads_pruned(self):
        """tula's own import makes the database; its export reads the pruned file (the schema
        checks of every open pass)."""
        doc = {"format": "tula-profiles", "schema_version": 10, "exported": 0, "workload_filter": None,
               "workloads": [{"name": "lenet5@fashion-mnist", "model": "lenet5", "dataset": "fashion-mnist", "params": 61706,
                              "train_examples": 60000, "test_examples": 10000}],
               "compute": [{"workload": "lenet5@fashion-mnist", "host": "n1", "local_batch": 64, "threads": 1,
                            "seconds_per_iter": 0.01, "iters": 10, "created": 1 + i, "ranks": k, "ranks_per_node": 1}
                           for i, k in enumerate((1, 2, 3, 4))],
               "allreduce": [{"host": "n1", "nodes": k, "bytes": 1048576, "seconds": 0.05, "created": k} for k in (2, 3, 4)],
               "runs": [{"job_id": str(k), "workload": "lenet5@fashion-mnist", "nodes": k, "global_batch": 64, "epochs": 1,
                         "predicted_seconds": 10, "measured_seconds": 11, "test_accuracy": 0.8, "created": k,
                         "epoch_rows": [{"epoch": 1, "seconds": 11, "train_loss": 0.5, "test_accuracy": 0.8}]}
                        for k in (1, 2, 3, 4)]}
        src, db, exported = (os.path.join(self.d, x) for x in ("in.json", "p.db", "out.json"))
        tb.write_text(src, json.dumps(doc))
        tula = tula_binary()
        subprocess.run([tula, "db", "import", "--db", db, src], check=True, stdout=subprocess.DEVNULL)
        with with_tula_on_path():
            self.assertEqual(tbr.prune_db(db, 2), {"compute": 2, "allreduce": 2, "runs": 2, "workloads": 0})
        subprocess.run([tula, "db", "export", "--db", db, "-o", exported], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        got = tb.read_json(exported)
        self.assertEqual([c["ranks"] for c in got["compute"]], [1, 2])
        self.assertEqual([a["nodes"] for a in got["allreduce"]], [2])
        self.assertEqual([(r["nodes"], len(r["epoch_rows"])) for r in got["runs"]], [(1, 1), (2, 1)])



class CommittedReports(unittest.TestCase):
    """The reports in results/ written again from their committed rows (--from-rows) are the
    committed report.md."""

    def test_regenerated(self):
        studies = [("results/ranks-report", rr.main, False), ("results/first-run-report", frr.main, False),
                   ("results/testbed-report", tbr.main, True), ("results/testbed-report-200mbit", tbr.main, True)]
        for results, main, out_dir in studies:
            with self.subTest(results=results), contextlib.redirect_stdout(io.StringIO()):
                assert_regenerated(self, main, results, ["--from-rows"], out_dir=out_dir)

if __name__ == "__main__":
    unittest.main()
