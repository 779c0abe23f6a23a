"""What the tests of the committed studies share: a report regenerated from a results folder of
the repository, compared byte for byte with the report.md committed beside its rows."""
import os
import shutil
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def assert_regenerated(test, main, results, args=(), out_dir=False):
    """main(["--results", results, "--out", FILE] + args), run in the repository, exits 0 and
    writes FILE equal to results/report.md; results is relative to the repository. out_dir: the
    command's --out is the report's folder (it writes report.md there), not the file."""
    d = tempfile.mkdtemp(prefix="tula-py-")
    test.addCleanup(shutil.rmtree, d)
    cwd = os.getcwd()
    os.chdir(REPO)
    test.addCleanup(os.chdir, cwd)
    out = os.path.join(d, "report.md")
    test.assertEqual(main(["--results", results, "--out", d if out_dir else out] + list(args)), 0)
    with open(out, "rb") as f, open(os.path.join(results, "report.md"), "rb") as g:
        test.assertTrue(f.read() == g.read(), "%s differs from %s/report.md" % (out, results))
