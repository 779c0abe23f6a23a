"""tula.Metrics: the exact bytes of the spec's lines, a flush per line, every value the reader
refuses refused here, the default path and "%r"."""

import json
import os
import shutil
import tempfile
import unittest
from unittest import mock

import tula

WL = "lenet5@fashion-mnist"


class MetricsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tula-py-")
        self.path = os.path.join(self.dir, "m.jsonl")
        patcher = mock.patch.dict(os.environ, {}, clear=False)
        patcher.start()
        self.addCleanup(patcher.stop)
        for name in ("SLURM_JOB_ID", "TULA_METRICS", "SLURM_PROCID", "RANK"):
            os.environ.pop(name, None)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def read(self):
        with open(self.path, "rb") as f:
            return f.read()

    def open(self, **kw):
        args = dict(workload=WL, nodes=2, ranks=4, global_batch=128)
        args.update(kw)
        return tula.Metrics(self.path, **args)

    def test_exact_bytes_and_flush_per_line(self):
        m = self.open()
        self.assertEqual(self.read(), b'{"type":"run","workload":"lenet5@fashion-mnist","nodes":2,"ranks":4,"global_batch":128}\n')
        m.step(0, 0.25, 128)
        self.assertTrue(self.read().endswith(b'{"type":"step","step":0,"seconds":0.25,"examples":128}\n'))
        m.epoch(1, 12.5, 0.875)
        self.assertTrue(self.read().endswith(b'{"type":"epoch","epoch":1,"seconds":12.5,"test_accuracy":0.875}\n'))
        m.close()
        lines = self.read().splitlines()
        self.assertEqual(len(lines), 4)
        self.assertEqual(lines[3], b'{"type":"summary","parts":1,"part_seconds":[0.25]}')

    def test_header_optional_fields_and_job_id(self):
        os.environ["SLURM_JOB_ID"] = "42"
        with self.open(epochs=3, params=1000, optimizer="sgd", predicted_seconds=12, train_examples=None):
            pass
        head = json.loads(self.read().splitlines()[0])
        self.assertEqual(head["job_id"], "42")
        self.assertEqual(head["predicted_seconds"], 12.0)
        self.assertNotIn("train_examples", head)
        self.assertEqual(list(head)[:5], ["type", "workload", "nodes", "ranks", "global_batch"])

    def test_epoch_optional_fields(self):
        with self.open() as m:
            m.epoch(1, 1.0, 0.5, train_loss=float("nan"), noise_scale=float("inf"), noise_observations=3)
            m.epoch(2, 1.0, 1.0, train_loss=0.0, noise_scale=512.5, extra="x")
        lines = self.read().splitlines()
        self.assertEqual(lines[1], b'{"type":"epoch","epoch":1,"seconds":1.0,"test_accuracy":0.5,'
                                   b'"train_loss":null,"noise_scale":null,"noise_observations":3}')
        self.assertEqual(json.loads(lines[2])["noise_scale"], 512.5)

    def test_profile_lines_only(self):
        with tula.Metrics(self.path, workload=WL, nodes=1, ranks=1, global_batch=None) as m:
            m.profile(32, 0.0125, 80)
            with self.assertRaises(ValueError):
                m.step(0, 1.0, 1)
        self.assertEqual(self.read(), b'{"type":"run","workload":"lenet5@fashion-mnist","nodes":1,"ranks":1}\n'
                                      b'{"type":"profile","local_batch":32,"seconds":0.0125,"steps":80}\n')

    def test_profile_startup_seconds(self):
        # written only when given, a finite number >= 0 (seconds of warm-up beyond steady steps)
        with tula.Metrics(self.path, workload=WL, nodes=1, ranks=1, global_batch=None) as m:
            m.profile(32, 0.0125, 80, startup_seconds=2.5)
            m.profile(64, 0.025, 40, startup_seconds=0)
            m.profile(128, 0.05, 20, startup_seconds=None)
            for bad in (-0.1, float("nan"), float("inf"), True, "1"):
                with self.subTest(bad=bad):
                    with self.assertRaises(ValueError) as cm:
                        m.profile(16, 0.01, 10, startup_seconds=bad)
                    self.assertTrue(str(cm.exception).startswith("tula: "))
        lines = [json.loads(x) for x in self.read().splitlines()][1:]
        self.assertEqual([2.5, 0.0], [x["startup_seconds"] for x in lines[:2]])
        self.assertNotIn("startup_seconds", lines[2])
        self.assertEqual(3, len(lines))

    def test_bad_headers(self):
        bad = [dict(workload="lenet5"), dict(workload="a@b@c"), dict(nodes=0), dict(ranks=3), dict(nodes=3, ranks=2),
               dict(global_batch=-1), dict(global_batch=1.5), dict(nodes=True), dict(epochs=0), dict(params=0),
               dict(optimizer=3), dict(predicted_seconds=-1), dict(predicted_seconds=float("nan")),
               dict(resumed="yes"), dict(resumed_at_step=3), dict(type="x"), dict(extra=object())]
        for kw in bad:
            with self.subTest(kw=kw):
                with self.assertRaises(ValueError) as cm:
                    self.open(**kw)
                self.assertTrue(str(cm.exception).startswith("tula: "))

    def test_bad_lines(self):
        m = self.open()
        m.step(5, 0.1, 128)
        m.epoch(1, 1.0, 0.5)
        bad = [lambda: m.step(5, 0.1, 128), lambda: m.step(4, 0.1, 128), lambda: m.step(-1, 0.1, 1),
               lambda: m.step(6, 0, 128), lambda: m.step(6, float("nan"), 128), lambda: m.step(6, float("inf"), 1),
               lambda: m.step(6, 0.1, 0), lambda: m.step(6.0, 0.1, 1), lambda: m.step(6, True, 1),
               lambda: m.epoch(1, 1.0, 0.5), lambda: m.epoch(3, 1.0, 0.5), lambda: m.epoch(2, 0, 0.5),
               lambda: m.epoch(2, 1.0, 1.01), lambda: m.epoch(2, 1.0, -0.1), lambda: m.epoch(2, 1.0, float("nan")),
               lambda: m.epoch(2, 1.0, 0.5, train_loss=-1), lambda: m.epoch(2, 1.0, 0.5, noise_scale=0),
               lambda: m.epoch(2, 1.0, 0.5, noise_observations=-1), lambda: m.epoch(2, 1.0, 0.5, big="x" * 70000),
               lambda: m.profile(0, 0.1, 1), lambda: m.profile(1, 0, 1), lambda: m.profile(1, 0.1, 0)]
        before = self.read()
        for i, call in enumerate(bad):
            with self.subTest(i=i):
                with self.assertRaises(ValueError) as cm:
                    call()
                self.assertTrue(str(cm.exception).startswith("tula: "))
        self.assertEqual(self.read(), before)  # nothing partial written
        m.step(6, 0.1, 128)
        m.epoch(2, 1.0, 0.5)
        m.close()
        with self.assertRaises(ValueError):
            m.step(7, 0.1, 128)

    def test_default_path_and_rank(self):
        os.chdir(self.dir)
        self.addCleanup(os.chdir, "/")
        self.assertEqual(tula.default_path({}), "tula-metrics.jsonl")
        self.assertEqual(tula.default_path({"SLURM_JOB_ID": "7"}), "tula-metrics-7.jsonl")
        os.environ["TULA_METRICS"] = os.path.join(self.dir, "r%r.jsonl")
        os.environ["SLURM_PROCID"] = "3"
        with tula.Metrics(workload=WL, nodes=1, ranks=4, global_batch=4):
            pass
        self.assertTrue(os.path.exists(os.path.join(self.dir, "r3.jsonl")))
        with tula.Metrics(workload=WL, nodes=1, ranks=4, global_batch=4, rank=1):
            pass
        self.assertTrue(os.path.exists(os.path.join(self.dir, "r1.jsonl")))

    def test_resume_appends(self):
        with self.open() as m:
            m.step(0, 0.1, 128)
            m.step(1, 0.1, 128)
            m.epoch(1, 1.0, 0.5)
        with open(self.path, "ab") as f:
            f.write(b'{"type":"step","st')  # cut short by a kill
        with self.open(resume=True, resumed_at_step=1) as m:
            with self.assertRaises(ValueError):
                m.epoch(1, 1.0, 0.6)
            with self.assertRaises(ValueError):  # before the steps done
                m.step(0, 0.1, 128)
            m.step(1, 0.1, 128)
            m.epoch(2, 1.0, 0.6)
        lines = self.read().splitlines()
        self.assertEqual(lines[5], b'{"type":"run","workload":"lenet5@fashion-mnist","nodes":2,"ranks":4,'
                                   b'"global_batch":128,"resumed":true,"resumed_at_step":1}')
        self.assertEqual([json.loads(x)["type"] for x in lines],
                         ["run", "step", "step", "epoch", "summary", "run", "step", "epoch", "summary"])
        self.assertEqual(json.loads(lines[-1]), {"type": "summary", "parts": 2, "part_seconds": [0.2, 0.1]})
        with self.assertRaises(ValueError):
            self.open(resume=True, global_batch=256)

    def test_part_seconds(self):
        # a part's seconds: its step lines' seconds, else its epoch lines'; a killed part (no
        # close, no summary) still counts from its lines when the next part resumes
        with self.open() as m:
            m.step(0, 0.5, 128)
            m.step(1, 0.25, 128)
        with open(self.path, "ab") as f:
            f.write(b'{"type":"run","workload":"lenet5@fashion-mnist","nodes":2,"ranks":4,"global_batch":128,'
                    b'"resumed":true}\n{"type":"epoch","epoch":1,"seconds":2.5,"test_accuracy":0.5}\n')
        with self.open(resume=True) as m:
            self.assertEqual(m.part_seconds(), [0.75, 2.5, 0.0])
            m.step(5, 1.5, 128)
            m.epoch(2, 9.0, 0.6)
            self.assertEqual(m.part_seconds(), [0.75, 2.5, 1.5])
        last = json.loads(self.read().splitlines()[-1])
        self.assertEqual(last, {"type": "summary", "parts": 3, "part_seconds": [0.75, 2.5, 1.5]})
        # a file of profile lines only has no summary
        os.remove(self.path)
        with self.open(global_batch=None) as m:
            m.profile(32, 0.01, 10)
        self.assertEqual([json.loads(x)["type"] for x in self.read().splitlines()], ["run", "profile"])


if __name__ == "__main__":
    unittest.main()
