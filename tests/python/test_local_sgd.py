"""Local SGD's batch-test measurement as rows (experiments.convert_local_sgd_logs,
experiments.local_sgd_report): the committed rows of results/local-sgd give back every log they
were converted from (the SHA-256 of each in the manifest), their report's table is the table of
the measurement's NOTE.md (the manifest's provenance), and the report is regenerated from them
identically."""

import hashlib
import os
import unittest

from experiments import convert_local_sgd_logs as conv
from experiments import local_sgd_report as rep
from experiments import rows
from committed import assert_regenerated

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RESULTS = os.path.join(REPO, "results", "local-sgd")


def table_lines(text):
    return [ln for ln in text.splitlines() if ln.startswith("|")]


class LocalSgdRowsTest(unittest.TestCase):
    def setUp(self):
        self.manifest, self.rows, _ = rows.read_study(RESULTS)

    def test_rows_give_back_every_log(self):
        got = {conv.log_name(r): hashlib.sha256(conv.row_to_log(r).encode()).hexdigest() for r in self.rows}
        self.assertEqual(got, self.manifest["source"]["log_sha256"])
        self.assertEqual(len(got), 15)

    def test_table_is_the_notes(self):
        text = rep.report(self.manifest, self.rows, "results/local-sgd")
        self.assertEqual(table_lines(text), table_lines(self.manifest["provenance"]))
        self.assertTrue(text.endswith(self.manifest["conclusion"]))

    def test_report_regenerated_from_the_rows(self):
        assert_regenerated(self, rep.main, os.path.join("results", "local-sgd"))

    def test_a_log_off_the_pattern(self):
        with self.assertRaises(ValueError):
            conv.log_to_row("beta-x-seed2.log", "command: tula-train --batch-size 128\n")
        with self.assertRaises(ValueError):
            conv.log_to_row("beta-0.9-seed2.log", "no command line\n")


if __name__ == "__main__":
    unittest.main()
