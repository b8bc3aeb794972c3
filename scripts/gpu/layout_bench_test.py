"""Tests of layout_bench.py's arguments (no torch needed). Run by scripts/test,
or alone: python3 -m unittest discover -s scripts/gpu -p '*_test.py'"""

import contextlib
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layout_bench as lb  # noqa: E402


class Args(unittest.TestCase):
    def test_defaults(self):
        a = lb.parse_args(["--allocator", "vram_fine"])
        self.assertEqual((a.allocator, a.blocks, a.passes, a.repeats, a.json), ("vram_fine", 96, 200, 5, None))

    def test_bad_input_is_an_error_that_names_it(self):
        for argv, want in ((["--allocator", "bogus"], "invalid choice: 'bogus'"),
                           (["--allocator", "default", "--blocks", "0"], "--blocks"),
                           ([], "--allocator")):
            err = io.StringIO()
            with self.assertRaises(SystemExit), contextlib.redirect_stderr(err):
                lb.parse_args(argv)
            self.assertIn(want, err.getvalue())


if __name__ == "__main__":
    unittest.main()
