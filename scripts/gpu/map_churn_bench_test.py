"""Tests of map_churn_bench.py's arguments and struct layouts (no torch or
GPU needed). Run by scripts/test, or alone:
python3 -m unittest discover -s scripts/gpu -p '*_test.py'"""

import contextlib
import ctypes
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import map_churn_bench as mc  # noqa: E402


class Args(unittest.TestCase):
    def test_defaults(self):
        a = mc.parse_args([])
        self.assertEqual((a.gib, a.passes, a.lead, a.repeats, a.ops, a.kinds),
                         (4.0, 200, 10, 3, [0, 1, 4, 16], ["remap", "map", "unmap"]))

    def test_bad_input_is_an_error_that_names_it(self):
        for argv, want in ((["--ops", "1,x"], "--ops '1,x'"),
                           (["--kinds", "remap,swap"], "'swap' is not"),
                           (["--passes", "0"], "--passes"),
                           (["--ops", "-1"], "--ops")):
            err = io.StringIO()
            with self.assertRaises(SystemExit), contextlib.redirect_stderr(err):
                mc.parse_args(argv)
            self.assertIn(want, err.getvalue())


class Layout(unittest.TestCase):
    def test_structs_match_cuda_h(self):
        # The sizes and offsets of CUmemAllocationProp and CUmemAccessDesc
        # (cuda/layout_test.go checks the Go side against cuda.h).
        self.assertEqual(ctypes.sizeof(mc.Prop), 32)
        self.assertEqual(mc.Prop.loc_type.offset, 8)
        self.assertEqual(mc.Prop.win32.offset, 16)
        self.assertEqual(mc.Prop.flags.offset, 24)
        self.assertEqual(ctypes.sizeof(mc.Access), 12)
        self.assertEqual(mc.Access.flags.offset, 8)


if __name__ == "__main__":
    unittest.main()
