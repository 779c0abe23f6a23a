"""tula.Requeue and its parts without Slurm and without PyTorch: Slurm's durations, the stop
reserve, the deadline (SLURM_JOB_END_TIME, squeue with a fake runner), the signals, the requeue
command, the atomic save (a failing save, a kill before the rename, a real kill -9) and the
resume."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from unittest import mock

import tula
from tula import _requeue

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch_fmnist.py")
DATA_DIR = os.environ.get("TULA_TEST_DATA_DIR", "/usr/share/datasets/fashion-mnist")

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


class FakeClock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


class FakeRunner:
    """run_command's stand-in: records each argv and timeout, answers from a list (a
    CompletedProcess-like reply, or an exception to raise)."""
    def __init__(self, *replies):
        self.calls = []
        self.replies = list(replies)

    def __call__(self, argv, timeout):
        self.calls.append((list(argv), timeout))
        reply = self.replies.pop(0) if self.replies else (0, "", "")
        if isinstance(reply, BaseException):
            raise reply
        rc, out, err = reply
        return subprocess.CompletedProcess(argv, rc, out, err)


def write(path, data):
    with open(path, "w") as f:
        f.write(data)


def read(path):
    with open(path) as f:
        return f.read()


class DurationTest(unittest.TestCase):
    def test_good(self):
        good = {"0:00": 0, "05:30": 330, "59:59": 3599, "1:02:03": 3723, "100:00:00": 360000,
                "2-03:04:05": ((2 * 24 + 3) * 60 + 4) * 60 + 5, "2-03": (2 * 24 + 3) * 3600,
                "2-03:04": (2 * 24 + 3) * 3600 + 240, "0-00:00:30": 30, "45": 2700, " 10:00\n": 600,
                "1000:00": 60000}
        for text, seconds in good.items():
            with self.subTest(text=text):
                self.assertEqual(tula.parse_slurm_duration(text), seconds)

    def test_no_deadline(self):
        for text in ("UNLIMITED", "NOT_SET", "INVALID", "unlimited", " INFINITE "):
            with self.subTest(text=text):
                self.assertIsNone(tula.parse_slurm_duration(text))

    def test_bad(self):
        bad = ["", " ", "abc", "1:60", "1:2:60", "1:60:00", "1-24:00:00", "-5:00", "+5:00", "1.5:00", "1:",
               ":30", "1-", "1::2", "1:00:00:00", "1-2-3", "1 :00", "\u0661:\u0660\u0660", "0x10", "5m",
               "1-00:00:00:00", None, 5, b"1:00"]
        for text in bad:
            with self.subTest(text=text):
                with self.assertRaises(ValueError) as cm:
                    tula.parse_slurm_duration(text)
                self.assertTrue(str(cm.exception).startswith("tula: "))


class ReserveTest(unittest.TestCase):
    def test_rule(self):
        self.assertEqual(tula.stop_reserve_seconds(0, 0), 30.0)
        self.assertEqual(tula.stop_reserve_seconds(10, 5), 55.0)
        self.assertEqual(tula.stop_reserve_seconds(0.25, 12.5), 43.0)

    def test_margin_is_libtula_s(self):
        # the copy of the fixed margin equals kStopMarginSeconds in libtula's stop.hpp
        header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "libtula", "include", "tula",
                              "stop.hpp")
        with open(header) as f:
            found = re.findall(r"^constexpr double kStopMarginSeconds = ([0-9.]+);$", f.read(), re.M)
        self.assertEqual(len(found), 1, "kStopMarginSeconds not found once in %s" % header)
        self.assertEqual(float(found[0]), _requeue.STOP_MARGIN_SECONDS)

    def test_bad(self):
        for step, ck in ((-1, 0), (0, -0.1), (float("nan"), 0), (0, float("inf")), ("1", 0), (True, 0), (None, 0)):
            with self.subTest(step=step, ck=ck):
                with self.assertRaises(ValueError):
                    tula.stop_reserve_seconds(step, ck)


class EndTimeTest(unittest.TestCase):
    def test_env_first(self):
        run = FakeRunner()
        self.assertEqual(tula.job_end_time({"SLURM_JOB_END_TIME": "1700000000", "SLURM_JOB_ID": "7"},
                                           FakeClock(), run), (1700000000.0, None))
        self.assertEqual(run.calls, [])

    def test_squeue(self):
        run = FakeRunner((0, "1:00:00\n", ""))
        self.assertEqual(tula.job_end_time({"SLURM_JOB_ID": "7"}, FakeClock(1000), run), (4600.0, None))
        self.assertEqual(run.calls, [(["squeue", "-h", "-j", "7", "-o", "%L"], 10.0)])
        end, note = tula.job_end_time({"SLURM_JOB_ID": "7"}, FakeClock(1000), FakeRunner((0, "UNLIMITED\n", "")))
        self.assertEqual((end, note), (None, None))

    def test_squeue_failures(self):
        cases = [(subprocess.TimeoutExpired(["squeue"], 10), "did not answer"),
                 (FileNotFoundError(2, "No such file or directory"), "cannot run squeue"),
                 ((1, "", "slurm_load_jobs error: Invalid job id specified\n"), "Invalid job id"),
                 ((0, "soon\n", ""), "not a duration"), ((0, "", ""), "not a duration")]
        for reply, words in cases:
            with self.subTest(reply=reply):
                end, note = tula.job_end_time({"SLURM_JOB_ID": "7"}, FakeClock(), FakeRunner(reply))
                self.assertIsNone(end)
                self.assertTrue(note.startswith("tula: ") and words in note and "\n" not in note, note)

    def test_outside_slurm_and_bad_env(self):
        run = FakeRunner()
        self.assertEqual(tula.job_end_time({}, FakeClock(), run), (None, None))
        self.assertEqual(run.calls, [])
        end, note = tula.job_end_time({"SLURM_JOB_END_TIME": "soon"}, FakeClock(), run)
        self.assertIsNone(end)
        self.assertIn("SLURM_JOB_END_TIME", note)


class RequeueJobTest(unittest.TestCase):
    def test_requeue_job(self):
        run = FakeRunner((0, "", ""))
        self.assertIsNone(tula.requeue_job("7", run))
        self.assertEqual(run.calls, [(["scontrol", "requeue", "7"], 30.0)])
        for reply, words in (((1, "", "scontrol: error: Requeue of job 7 failed: Requested operation is presently "
                                       "disabled\n"), "presently disabled"),
                             (subprocess.TimeoutExpired(["scontrol"], 30), "did not answer"),
                             (PermissionError(13, "Permission denied"), "cannot run scontrol")):
            with self.subTest(reply=reply):
                msg = tula.requeue_job("7", FakeRunner(reply))
                self.assertTrue(msg.startswith("tula: ") and words in msg and "\n" not in msg, msg)


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tula-py-")
        self.addCleanup(shutil.rmtree, self.dir)
        self.ck = os.path.join(self.dir, "ck.pt")
        self.said = []
        self.saved = 0

    def save(self, path):
        self.saved += 1
        write(path, "state %d" % self.saved)

    def make(self, env=None, run=None, clock=None, **kw):
        kw.setdefault("path", self.ck)
        self.run = run if run is not None else FakeRunner()
        self.clock = clock if clock is not None else FakeClock()
        return tula.Requeue(kw.pop("save", self.save), env={} if env is None else env, run=self.run,
                            clock=self.clock, say=self.said.append, **kw)

    def temps(self):
        return [n for n in os.listdir(self.dir) if n.endswith(".tmp")]


class DecisionTest(Base):
    ENV = {"SLURM_JOB_ID": "7", "SLURM_JOB_END_TIME": "1000"}

    def test_clock_stop_and_requeue(self):
        with self.make(self.ENV, clock=FakeClock(900.0)) as rq:
            self.assertEqual(rq.end_time, 1000.0)
            self.assertFalse(rq.should_stop(10.0))      # 900 + 30 + 20 < 1000
            self.clock.now = 949.9
            self.assertFalse(rq.should_stop(5.0))       # the longest step counts: 949.9 + 50 < 1000
            self.assertEqual(rq.step_seconds, 10.0)
            self.clock.now = 950.0
            self.assertTrue(rq.should_stop(1.0))        # 950 + 50 >= 1000
            self.assertEqual(rq.reason, "time")
            with self.assertRaises(SystemExit) as cm:
                rq.stop(42)
        self.assertEqual(cm.exception.code, 3)
        self.assertEqual(tula.STOP_EXIT_STATUS, 3)
        self.assertEqual(read(self.ck), "state 1")
        self.assertEqual(self.run.calls, [(["scontrol", "requeue", "7"], 30.0)])
        self.assertTrue(any("step 42" in m for m in self.said), self.said)
        self.assertTrue(all(m.startswith("tula: ") for m in self.said), self.said)

    def test_checkpoint_seconds_in_reserve(self):
        rq = self.make(self.ENV, clock=FakeClock(900.0), checkpoint_seconds=25.0)
        with rq:
            self.assertEqual(rq.reserve_seconds(), 55.0)
            self.assertFalse(rq.should_stop(0.0))       # 900 + 55 < 1000
            self.clock.now = 945.0
            self.assertTrue(rq.should_stop(0.0))
            with mock.patch.object(_requeue, "atomic_save", return_value=7.5), self.assertRaises(SystemExit):
                rq.stop()
        self.assertEqual(rq.checkpoint_seconds, 7.5)

    def test_step_seconds_measured_between_calls(self):
        with self.make(self.ENV, clock=FakeClock(0.0)) as rq:
            self.assertFalse(rq.should_stop())
            self.assertEqual(rq.step_seconds, 0.0)
            self.clock.now = 12.0
            self.assertFalse(rq.should_stop())
            self.assertEqual(rq.step_seconds, 12.0)
            with self.assertRaises(ValueError):
                rq.should_stop(-1.0)

    def test_squeue_fallback_and_no_deadline(self):
        run = FakeRunner((0, "10:00\n", ""))
        with self.make({"SLURM_JOB_ID": "7"}, run=run, clock=FakeClock(100.0)) as rq:
            self.assertEqual(rq.end_time, 700.0)
        run = FakeRunner(subprocess.TimeoutExpired(["squeue"], 10))
        with self.make({"SLURM_JOB_ID": "7"}, run=run, clock=FakeClock(100.0)) as rq:
            self.assertIsNone(rq.end_time)
            self.clock.now = 1e12
            self.assertFalse(rq.should_stop(1.0))
        self.assertEqual(len([m for m in self.said if "no deadline" in m]), 1)

    def test_sigusr1_stops_and_requeues(self):
        before = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGTERM)
        with self.make({"SLURM_JOB_ID": "7"}, run=FakeRunner((0, "UNLIMITED", ""))) as rq:
            self.assertFalse(rq.should_stop(1.0))
            os.kill(os.getpid(), signal.SIGUSR1)
            self.assertTrue(rq.should_stop(1.0))
            self.assertEqual(rq.reason, "SIGUSR1")
            with self.assertRaises(SystemExit) as cm:
                rq.stop()
        self.assertEqual(cm.exception.code, 3)
        self.assertEqual(self.run.calls[-1], (["scontrol", "requeue", "7"], 30.0))
        self.assertEqual((signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGTERM)), before)

    def test_sigterm_saves_without_requeue(self):
        with self.make(self.ENV) as rq:
            os.kill(os.getpid(), signal.SIGTERM)
            self.assertTrue(rq.should_stop(1.0))
            self.assertEqual(rq.reason, "SIGTERM")
            os.kill(os.getpid(), signal.SIGUSR1)     # both: SIGTERM wins
            with self.assertRaises(SystemExit) as cm:
                rq.stop()
        self.assertEqual(cm.exception.code, 3)
        self.assertEqual(read(self.ck), "state 1")
        self.assertEqual(self.run.calls, [])

    def test_requeue_refused_is_not_fatal(self):
        run = FakeRunner((1, "", "scontrol: error: Requeue of job 7 failed: Requested operation is presently "
                                 "disabled\n"))
        with self.make(self.ENV, run=run) as rq:
            os.kill(os.getpid(), signal.SIGUSR1)
            self.assertTrue(rq.should_stop())
            with self.assertRaises(SystemExit) as cm:
                rq.stop()
        self.assertEqual(cm.exception.code, 3)
        refused = [m for m in self.said if "presently disabled" in m]
        self.assertEqual(len(refused), 1)
        self.assertTrue(refused[0].startswith("tula: ") and "\n" not in refused[0])

    def test_no_requeue_outside_slurm_or_when_off(self):
        for env, kw in (({}, {}), (self.ENV, {"requeue": False})):
            with self.subTest(env=env):
                with self.make(env, **kw) as rq:
                    os.kill(os.getpid(), signal.SIGUSR1)
                    self.assertTrue(rq.should_stop())
                    with self.assertRaises(SystemExit):
                        rq.stop()
                self.assertEqual(self.run.calls, [])

    def test_ranks_agree(self):
        # this rank got SIGUSR1, another one SIGTERM: stop, no requeue
        other = [0.0, 0.0, 0.0]
        agree = lambda v: [max(a, b) for a, b in zip(v, other + [0.0] * (len(v) - len(other)))]  # noqa: E731
        with self.make(self.ENV, agree=agree, rank=0) as rq:
            other[:] = [0.0, 1.0, 0.0]                   # usr1, term, clock
            self.assertTrue(rq.should_stop())           # the other rank's SIGTERM
            self.assertEqual(rq.reason, "SIGTERM")
            os.kill(os.getpid(), signal.SIGUSR1)
            other[:] = [0.0, 0.0, 1.0, 0.0]              # failed, usr1, term, clock
            with self.assertRaises(SystemExit):
                rq.stop()
        self.assertEqual(self.run.calls, [])

    def test_other_rank_takes_rank0_deadline_and_does_not_save(self):
        run = FakeRunner()
        agree = lambda v: [max(v[0], 5000.0)] + list(v[1:]) if len(v) == 3 and v[1] + v[2] == 1 else list(v)  # noqa: E731
        with self.make({"SLURM_JOB_ID": "7"}, run=run, agree=agree, rank=1, clock=FakeClock(4960.0)) as rq:
            self.assertEqual(rq.end_time, 5000.0)
            self.assertTrue(rq.should_stop(5.0))
            with self.assertRaises(SystemExit):
                rq.stop()
        self.assertEqual(run.calls, [])                  # neither squeue nor scontrol on rank 1
        self.assertFalse(os.path.exists(self.ck))        # rank 0 saves the shared file

    def test_rank_path_every_rank_saves(self):
        with self.make({}, path=os.path.join(self.dir, "ck-%r.pt"), rank=3) as rq:
            self.assertEqual(rq.path, os.path.join(self.dir, "ck-3.pt"))
            with self.assertRaises(SystemExit):
                rq.stop()
        self.assertEqual(read(os.path.join(self.dir, "ck-3.pt")), "state 1")

    def test_default_path_and_errors(self):
        cwd = os.getcwd()
        os.chdir(self.dir)
        self.addCleanup(os.chdir, cwd)
        with self.make(self.ENV, path=None) as rq:
            self.assertEqual(rq.path, "tula-ckpt-7.pt")
            self.assertFalse(rq.resumed)
        with self.assertRaises(ValueError):
            self.make({}, path=None)
        with self.assertRaises(ValueError):
            self.make({}, checkpoint_seconds=-1)
        with self.assertRaises(ValueError):
            self.make({"SLURM_RESTART_COUNT": "x"})
        rq = self.make({})
        with self.assertRaises(RuntimeError):
            rq.should_stop()

    def test_no_torch_agreement(self):
        # torch not loaded, or torch.distributed not set up: each rank alone
        self.assertIsNone(_requeue.torch_agree())


class ResumeTest(Base):
    def test_restart_loads_the_checkpoint(self):
        write(self.ck, "state 9")
        loads = []
        env = {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1", "SLURM_JOB_END_TIME": "5000"}
        with self.make(env, load=lambda p: loads.append(p) or read(p)) as rq:
            self.assertTrue(rq.resumed)
            self.assertEqual(rq.resume_path, self.ck)
            self.assertEqual(rq.loaded, "state 9")
        self.assertEqual(loads, [self.ck])
        self.assertTrue(any("resuming from checkpoint" in m and "restart 1" in m for m in self.said), self.said)

    def test_restart_without_checkpoint_starts_afresh(self):
        loads = []
        with self.make({"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "2", "SLURM_JOB_END_TIME": "5000"},
                       load=loads.append) as rq:
            self.assertFalse(rq.resumed)
        self.assertEqual(loads, [])
        self.assertTrue(any("starting afresh" in m for m in self.said), self.said)

    def test_existing_checkpoint_outside_slurm(self):
        write(self.ck, "state 4")
        loads = []
        with self.make({}, load=loads.append) as rq:
            self.assertTrue(rq.resumed)
        self.assertEqual(loads, [self.ck])

    def test_ranks_disagree_on_the_file(self):
        write(self.ck, "x")
        with self.assertRaises(RuntimeError):
            with self.make({}, agree=lambda v: [v[0], 1.0, 1.0] if len(v) == 3 else v):
                pass
        self.assertEqual(signal.getsignal(signal.SIGUSR1), signal.SIG_DFL)


class AtomicSaveTest(Base):
    def setUp(self):
        super().setUp()
        write(self.ck, "old")

    def test_replaces_and_times(self):
        seconds = tula.atomic_save(self.save, self.ck)
        self.assertGreaterEqual(seconds, 0.0)
        self.assertEqual(read(self.ck), "state 1")
        self.assertEqual(self.temps(), [])

    def test_failing_save_keeps_the_old(self):
        def bad(path):
            write(path, "half")
            raise OSError(28, "No space left on device")
        with self.assertRaises(OSError):
            tula.atomic_save(bad, self.ck)
        with self.assertRaises(RuntimeError):
            tula.atomic_save(lambda path: None, self.ck)   # wrote nothing
        self.assertEqual(read(self.ck), "old")
        self.assertEqual(self.temps(), [])

    def test_kill_before_rename_keeps_the_old(self):
        with mock.patch.object(_requeue.os, "replace", side_effect=KeyboardInterrupt):
            with self.assertRaises(KeyboardInterrupt):
                tula.atomic_save(self.save, self.ck)
        self.assertEqual(read(self.ck), "old")

    def test_failing_save_in_stop(self):
        def bad(path):
            raise OSError(5, "Input/output error")
        with self.make({"SLURM_JOB_ID": "7", "SLURM_JOB_END_TIME": "5000"}, save=bad) as rq:
            os.kill(os.getpid(), signal.SIGUSR1)
            self.assertTrue(rq.should_stop())
            with self.assertRaises(OSError):
                rq.stop()
        self.assertEqual(read(self.ck), "old")
        self.assertEqual(self.run.calls, [])
        self.assertTrue(any("not saved" in m for m in self.said))

    def test_other_rank_failed_save(self):
        agree = lambda v: [1.0] + list(v[1:]) if len(v) == 4 else list(v)  # noqa: E731
        with self.make({"SLURM_JOB_ID": "7", "SLURM_JOB_END_TIME": "5000"}, agree=agree) as rq:
            os.kill(os.getpid(), signal.SIGUSR1)
            self.assertTrue(rq.should_stop())
            with self.assertRaises(RuntimeError):
                rq.stop()
        self.assertEqual(self.run.calls, [])

    def test_kill_9_during_save(self):
        code = textwrap.dedent("""
            import os, signal, sys
            import tula
            def save(path):
                with open(path, "w") as f:
                    f.write("half of the new state")
                    f.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            tula.atomic_save(save, sys.argv[1])
        """)
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
        out = subprocess.run([sys.executable, "-c", code, self.ck], env=env, capture_output=True, timeout=60)
        self.assertEqual(out.returncode, -signal.SIGKILL, out.stderr)
        self.assertEqual(read(self.ck), "old")
        self.assertEqual(len(self.temps()), 1)            # the killed save's leftover
        loads = []
        with self.make({"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1", "SLURM_JOB_END_TIME": "5000"},
                       load=lambda p: loads.append(read(p))) as rq:
            self.assertTrue(rq.resumed)
        self.assertEqual(loads, ["old"])
        self.assertEqual(self.temps(), [])                # removed on entry


@unittest.skipUnless(HAVE_TORCH, "PyTorch is not installed (scripts/install-deps --torch)")
@unittest.skipUnless(os.path.exists(os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz")),
                     "no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist)" % DATA_DIR)
class ExampleResumeTest(Base):
    """examples/pytorch_fmnist.py stopped by the clock after its first step, requeued (a fake
    scontrol), resumed: the same steps, epochs, losses and accuracies as a run without a stop."""

    def example(self, tag, **env):
        bin_dir = os.path.join(self.dir, "bin")
        if not os.path.isdir(bin_dir):
            os.mkdir(bin_dir)
            for name in ("scontrol", "squeue"):  # never the real ones: they would reach a live cluster
                write(os.path.join(bin_dir, name), "#!/bin/sh\necho \"$0 $*\" >> %s/calls\n" % self.dir)
                os.chmod(os.path.join(bin_dir, name), 0o755)
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TULA_", "RANK", "WORLD_SIZE"))}
        clean.update(env, PYTHONPATH=PYTHON_DIR, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
                     TULA_METRICS=os.path.join(self.dir, tag + ".jsonl"))
        return subprocess.run([sys.executable, EXAMPLE, "--limit-train", "256", "--limit-test", "200", "--epochs", "2",
                               "--batch-size", "64", "--data-dir", DATA_DIR], cwd=self.dir, env=clean,
                              capture_output=True, text=True, timeout=300)

    def lines(self, tag):
        import json
        with open(os.path.join(self.dir, tag + ".jsonl")) as f:
            return [json.loads(x) for x in f]

    def test_stop_requeue_resume(self):
        full = self.example("full")
        self.assertEqual(full.returncode, 0, full.stderr)
        part1 = self.example("part", SLURM_JOB_ID="77", SLURM_JOB_END_TIME="1")  # the end has passed
        self.assertEqual(part1.returncode, 3, part1.stderr)
        self.assertIn("tula: stopping at step 1 (the time limit is near)", part1.stderr)
        self.assertEqual(read(os.path.join(self.dir, "calls")).split("\n")[0].split()[1:], ["requeue", "77"])
        self.assertTrue(os.path.exists(os.path.join(self.dir, "tula-ckpt-77.pt")))
        part2 = self.example("part", SLURM_JOB_ID="77", SLURM_RESTART_COUNT="1",
                             SLURM_JOB_END_TIME=str(int(time.time()) + 3600))
        self.assertEqual(part2.returncode, 0, part2.stderr)
        self.assertIn("tula: resuming from checkpoint tula-ckpt-77.pt (restart 1 of job 77)", part2.stderr)
        a, b = self.lines("full"), self.lines("part")
        self.assertEqual([o["step"] for o in b if o["type"] == "step"], list(range(8)))
        self.assertEqual([o.get("resumed_at_step") for o in b if o["type"] == "run"], [None, 1])
        ea = [(o["epoch"], o["test_accuracy"], round(o["train_loss"], 6)) for o in a if o["type"] == "epoch"]
        eb = [(o["epoch"], o["test_accuracy"], round(o["train_loss"], 6)) for o in b if o["type"] == "epoch"]
        self.assertEqual(ea, eb)
        self.assertEqual(len(read(os.path.join(self.dir, "calls")).splitlines()), 1)  # no squeue, one requeue


if __name__ == "__main__":
    unittest.main()
