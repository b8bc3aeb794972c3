"""Tests of lockstep_bench.py and of train_bench.py's turn-taking, without
torch or a GPU (python3 -m unittest discover -s scripts/gpu -p '*_test.py')."""

import contextlib
import importlib.util
import io
import os
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lockstep_bench as lb  # noqa: E402
import train_bench as tb  # noqa: E402


def fifos(d):
    a, b = os.path.join(d, "1to2"), os.path.join(d, "2to1")
    os.mkfifo(a)
    os.mkfifo(b)
    return a, b


class Args(unittest.TestCase):
    def test_bad_input_is_refused(self):
        for argv in (["--workload", "kvgen", "--pairs", "default"],
                     ["--workload", "kvgen", "--pairs", "default,"],
                     ["--workload", "kvgen", "--pairs", "default,vram", "--steps", "5", "--warmup", "5"],
                     ["--workload", "kvgen", "--pairs", "default,vram", "--", "--turns", "x,y"],
                     ["--workload", "kvgen", "--pairs", "default,vram", "--", "--max-seconds=3"]):
            with self.subTest(argv=argv), contextlib.redirect_stderr(io.StringIO()):
                with self.assertRaises(SystemExit):
                    lb.parse_args(argv)

    def test_extra_args_pass_through(self):
        a = lb.parse_args(["--workload", "gpt2", "--pairs", "default,vram_fine", "vram_fine,default",
                           "--", "--batch", "4"])
        self.assertEqual(a.pairs, [("default", "vram_fine"), ("vram_fine", "default")])
        self.assertEqual(a.extra, ["--batch", "4"])

    def test_train_bench_refuses_turns_with_a_time_limit(self):
        for argv in (["--turns", "a", "--max-seconds", "0"],
                     ["--turns", "a,b", "--max-seconds", "5"],
                     ["--turns", "a,b", "--gpu-lock", "l"],
                     ["--turn-first"]):
            with self.subTest(argv=argv), contextlib.redirect_stderr(io.StringIO()):
                with self.assertRaises(SystemExit):
                    tb.parse_args(["--workload", "kvgen", "--allocator", "default"] + argv)


class Paired(unittest.TestCase):
    def test_step_by_step_ratios(self):
        first = [100.0, 200.0, 100.0, 300.0]
        second = [101.0, 202.0, 103.0, 303.0, 999.0]  # the extra step has no partner
        got = lb.paired(first, second)
        self.assertEqual(got["steps"], 4)
        self.assertEqual(got["ratio_median"], 1.01)  # ratios 1.01, 1.01, 1.03, 1.01
        self.assertEqual(got["ratio_p25"], 1.01)
        self.assertEqual(got["ratio_p75"], 1.01)
        self.assertEqual(got["ratio_p75"], tb.percentile([1.01, 1.01, 1.03, 1.01], 75))
        self.assertEqual(got["first_ms"], 150.0)
        self.assertEqual(got["second_ms"], 152.5)

    def test_interval_of_the_median(self):
        same = lb.paired([100.0] * 20, [101.0] * 20)
        self.assertEqual(same["ratio_ci95"], [1.01, 1.01])  # every step alike: no doubt
        self.assertEqual(same["ratio_log_sd"], 0)
        first = [100.0 + (i % 7) for i in range(40)]
        second = [f * (1.0 + 0.01 * ((i * 5) % 9 - 4)) for i, f in enumerate(first)]  # ratios 0.96..1.04
        got = lb.paired(first, second)
        lo, hi = got["ratio_ci95"]
        self.assertLessEqual(lo, got["ratio_median"])
        self.assertLessEqual(got["ratio_median"], hi)
        self.assertLess(hi - lo, 0.08)
        self.assertGreater(hi - lo, 0)
        self.assertEqual(lb.paired(first, second), got)  # the same steps give the same interval

    def test_no_steps(self):
        self.assertEqual(lb.paired([], [1.0]), {"steps": 0})

    def test_order_corrected(self):
        res = [{"ok": True, "first": "default", "second": "vram_fine", "ratio_median": 1.04},
               {"ok": True, "first": "vram_fine", "second": "default", "ratio_median": 0.98},
               {"ok": True, "first": "default", "second": "default", "ratio_median": 1.01},
               {"ok": True, "first": "default", "second": "vram_paged", "ratio_median": 1.2}]  # one order only
        res = [dict(r, workload="kvgen") for r in res]
        res.append(dict(res[0], workload="gpt2"))  # another workload's line does not pair with kvgen's
        got = lb.order_corrected(res)
        self.assertEqual(set(got), {("kvgen", "vram_fine")})
        v, lo, hi, k = got[("kvgen", "vram_fine")]
        self.assertAlmostEqual(v, (1.04 / 0.98) ** 0.5, places=4)
        self.assertEqual((lo, hi, k), (None, None, 1))  # no per-step ratios, no interval

    def test_order_corrected_interval(self):
        first = [100.0 + (i % 7) for i in range(40)]
        a = lb.paired(first, [f * (1.02 + 0.01 * ((i * 5) % 9 - 4)) for i, f in enumerate(first)])
        b = lb.paired(first, [f * (0.98 + 0.01 * ((i * 3) % 9 - 4)) for i, f in enumerate(first)])
        res = [dict(a, workload="kvgen", ok=True, first="default", second="vram_fine"),
               dict(b, workload="kvgen", ok=True, first="vram_fine", second="default")]
        v, lo, hi, k = lb.order_corrected(res)[("kvgen", "vram_fine")]
        self.assertEqual(k, 1)
        self.assertAlmostEqual(v, (a["ratio_median"] / b["ratio_median"]) ** 0.5, places=4)
        self.assertLess(lo, v)
        self.assertLess(v, hi)
        self.assertLess(hi - lo, 0.04)  # two pairs of +-4 % steps: the corrected ratio is known to about +-1.5 %
        self.assertEqual(lb.order_corrected(res)[("kvgen", "vram_fine")], (v, lo, hi, k))  # a fixed seed
        self.assertIn("kvgen vram_fine %.4f (%.4f–%.4f; 1 pair of processes an order)" % (v, lo, hi), lb.table(res))
        # the same pairs again (a second call): their steps pool, the interval narrows
        v2, lo2, hi2, k2 = lb.order_corrected(res + res)[("kvgen", "vram_fine")]
        self.assertEqual(k2, 2)
        self.assertAlmostEqual(v2, v, places=3)
        self.assertLess(hi2 - lo2, hi - lo)

    def test_order_corrected_counts_processes(self):
        # three pairs of processes an order whose steps agree within each process but whose
        # processes differ by +-5 %: the interval must be wide, though every process is tight
        def line(first, second, c):
            p = lb.paired([100.0] * 40, [100.0 * c * (1 + 0.001 * (i % 3 - 1)) for i in range(40)])
            return dict(p, workload="gpt2", ok=True, first=first, second=second)
        res = [line("default", "vram_fine", c) for c in (0.95, 1.0, 1.05)] + \
              [line("vram_fine", "default", c) for c in (0.95, 1.0, 1.05)]
        v, lo, hi, k = lb.order_corrected(res)[("gpt2", "vram_fine")]
        self.assertEqual(k, 3)
        self.assertAlmostEqual(v, 1.0, places=2)
        self.assertGreater(hi - lo, 0.03)  # the steps alone would give about 0.002
        one = lb.order_corrected(res[1:2] + res[4:5])[("gpt2", "vram_fine")]
        self.assertLess(one[2] - one[1], 0.005)

    def test_table(self):
        ok = dict(workload="kvgen", ok=True, steps=40, first_ms=380.0, second_ms=395.2, ratio_median=1.04,
                  ratio_p25=1.02, ratio_p75=1.06, ratio_of_medians=1.04, first_run={"sm_mhz_median": 1980},
                  second_run={})
        rows = [dict(ok, first="default", second="vram_fine"),
                dict(ok, first="vram_fine", second="default", ratio_median=0.98),
                {"workload": "kvgen", "ok": False, "first": "a", "second": "b", "error": "a: boom"}]
        text = lb.table(rows)
        self.assertIn("| kvgen | default | vram_fine | 40 | 380.0 · 395.2 | 1.0400 (1.0200–1.0600) | - | 1.0400 | 1980 · - |", text)
        self.assertIn("| kvgen | a | b | failed: a: boom |", text)
        rows[0]["ratio_ci95"] = [1.03, 1.05]
        self.assertIn("| 1.0400 (1.0200–1.0600) | 1.0300–1.0500 | 1.0400 |", lb.table(rows))
        self.assertIn("Order-corrected, sqrt(r(default,X) / r(X,default)), with its 95 % interval (the steps of a pair's lines pooled): kvgen vram_fine 1.0302 (no interval; 1 pair of processes an order)", text)


class Turns(unittest.TestCase):
    def test_two_runs_alternate(self):
        with tempfile.TemporaryDirectory() as d:
            f12, f21 = fifos(d)
            order, lock = [], threading.Lock()

            def steps(name, turns):
                for i in range(5):
                    turns.wait()
                    with lock:
                        order.append("%s%d" % (name, i))
                    turns.done()

            one = tb.Turns(f21 + "," + f12, True, 5)
            two = tb.Turns(f12 + "," + f21, False, 5)
            t = threading.Thread(target=steps, args=("b", two))
            t.start()
            steps("a", one)
            t.join(5)
            self.assertEqual(order, ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3", "a4", "b4"])

    def test_a_stopped_partner_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            f12, f21 = fifos(d)
            one = tb.Turns(f21 + "," + f12, True, 5)
            two = tb.Turns(f12 + "," + f21, False, 5)
            one.wait()  # the first step needs no turn
            one.stop()  # and then the run failed
            with self.assertRaisesRegex(RuntimeError, "partner run stopped"):
                two.wait()

    def test_a_silent_partner_times_out(self):
        with tempfile.TemporaryDirectory() as d:
            f12, f21 = fifos(d)
            two = tb.Turns(f12 + "," + f21, False, 0.2)
            with self.assertRaisesRegex(RuntimeError, "no turn in 0.2 s"):
                two.wait()


@unittest.skipIf(importlib.util.find_spec("torch") is not None, "torch is here: the pair would really run")
class PairWithoutTorch(unittest.TestCase):
    def test_both_runs_fail_fast_and_the_pair_says_why(self):
        with tempfile.TemporaryDirectory() as d:
            a = lb.parse_args(["--workload", "kvgen", "--pairs", "default,vram_fine", "--pair-timeout", "60",
                               "--out", d])
            res = lb.run_pair(a, 1, "default", "vram_fine", d)
            self.assertFalse(res["ok"])
            self.assertEqual(res["exit"], [1, 1])
            self.assertIn("default: ModuleNotFoundError", res["error"])
            self.assertIn("vram_fine: ModuleNotFoundError", res["error"])
            self.assertLess(res["wall_s"], 60)

    def test_a_run_that_fails_before_its_steps_stops_its_partner(self):
        import subprocess
        with tempfile.TemporaryDirectory() as d:
            f12, f21 = fifos(d)
            partner = tb.Turns(f12 + "," + f21, False, 30)
            p = subprocess.run([sys.executable, lb.TRAIN_BENCH, "--workload", "kvgen", "--allocator", "default",
                                "--turns", f21 + "," + f12, "--turn-first"], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1)
            self.assertIn('"ok": false', p.stdout)
            with self.assertRaisesRegex(RuntimeError, "partner run stopped"):
                partner.wait()


if __name__ == "__main__":
    unittest.main()
