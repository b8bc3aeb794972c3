"""Tests of train_bench.py's helpers that need no torch (the CI machine has
none): the driver work of the timed steps. Run by scripts/test, or alone:

    python3 -m unittest discover -s scripts/gpu -p '*_test.py'
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_bench as tb  # noqa: E402


class VramConf(unittest.TestCase):
    def test_each_allocators_settings(self):
        for allocator, want in (("vram", ""), ("vram_paged", "page_mapped:true"),
                                ("vram_fine", "page_mapped:true,page_regime:fine"),
                                ("vram_fine_keep", "page_mapped:true,page_regime:fine,page_release_window:off"),
                                ("vram_fine_wait", "page_mapped:true,page_regime:fine,page_defer_unmap:false")):
            a = tb.parse_args(["--workload", "kvgen", "--allocator", allocator])
            self.assertEqual(tb.vram_conf(a), want, allocator)


class TimedAlloc(unittest.TestCase):
    def test_deltas_and_share(self):
        before = {"num_device_alloc": 100, "num_mem_map": 150, "stream_sync_ns": 1000000, "device_call_ns": 9000000}
        after = {"num_device_alloc": 110, "num_mem_map": 170, "stream_sync_ns": 3000000, "device_call_ns": 12000000}
        got = tb.timed_alloc(before, after, 1000.0)  # 1 s of timed steps
        self.assertEqual(got["num_device_alloc"], 10)
        self.assertEqual(got["num_mem_map"], 20)
        self.assertEqual(got["device_call_ns"], 3000000)
        self.assertEqual(got["stream_sync_ns"], 2000000)
        self.assertAlmostEqual(got["share_of_step_time"], 0.005)  # 5 ms of 1 s

    def test_pytorch_counts_have_no_share(self):
        got = tb.timed_alloc({"num_device_alloc": 3, "num_device_free": 0},
                             {"num_device_alloc": 5, "num_device_free": 1}, 500.0)
        self.assertEqual(got, {"num_device_alloc": 2, "num_device_free": 1})

    def test_an_error_is_passed_on(self):
        got = tb.timed_alloc({"error": "OSError: no library"}, {"num_device_alloc": 1}, 10.0)
        self.assertEqual(got, {"error": "OSError: no library"})


class SMClockTest(unittest.TestCase):
    def test_without_a_handle_it_reads_nothing(self):
        c = tb.SMClock()
        c.h = None  # no NVML, or no device 0: the CI machine's case
        self.assertIsNone(c.read())


if __name__ == "__main__":
    unittest.main()
