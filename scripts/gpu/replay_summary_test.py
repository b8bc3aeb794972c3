"""Tests of replay_summary.py on scripts/testdata/replay-race.jsonl: two traces
(leak_retained_graph, lstm_varlen) with the record shapes of the H200 run of
2026-12-02 (docs/gpu-runs/2026-12-02/lib/cupti.log: the harness's lines with
CUPTI counts, vram's per-process check lines), tagged as replay.sh tags them,
with three timed rounds. Run by scripts/replay_summary_test.go (go test ./...)
or alone:

    python3 -m unittest discover -s scripts/gpu -p '*_test.py'
"""

import contextlib
import copy
import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import replay_summary as rs  # noqa: E402

FIXTURE = os.path.join(HERE, "..", "testdata", "replay-race.jsonl")
TRACES = ["leak_retained_graph", "lstm_varlen"]


def load():
    with open(FIXTURE) as f:
        return [json.loads(line) for line in f]


def render(recs, traces=TRACES, repeats=3):
    text, bad, n = rs.summary([json.dumps(r) for r in recs], traces, repeats)
    return text


def verdict_line(text, start):
    for line in text.splitlines():
        if line.startswith("- **") and start in line:
            return line
    raise AssertionError("no verdict line with %r in\n%s" % (start, text))


def is_paged(r):
    return r.get("policy") == "paged"


def is_expandable(r):
    return rs.allocator(r) == "torch expandable"


class FixtureTest(unittest.TestCase):
    def test_tables(self):
        text = render(load())
        for row in [
            "| leak_retained_graph | 1611 | 805 | 1.0235 | 1.0061 | 1.0210 | 1.0061 | – | yes (16 runs) |",
            "| lstm_varlen | 5284 | 4971 | 1.0047 | 2.2226 | 1.1165 | 2.2226 | 1.0030 | yes (20 runs) |",
            # CUPTI's counts of the 2026-12-02 run, beside vram's by kind.
            "| lstm_varlen | torch expandable | 0 | 0 | 2 | 0 | 282 | 0 | 282 | 20 | 0 | 586 |",
            "| lstm_varlen | vram paged | 5 | 0 | 1 | 0 | 1011 | 505 | 1011 | 1011 | 506 | 4050 |",
            "| leak_retained_graph | torch default | 16 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 16 |",
            "| leak_retained_graph | 200 | 117 | 1.71 | 16 | 16 |",
            "| lstm_varlen | 4050 | 586 | 6.91 | 22 | 22 |",
            # Medians (min–max) of the three timed rounds; cudaMalloc ran once.
            "| leak_retained_graph | 4.00 (3.90–4.80), 3 | 1.50 (1.40–2.20), 3 | 4.10 (3.80–5.80), 3 | "
            "1.90 (1.50–2.50), 3 | – | 0.98 |",
            "| lstm_varlen | 147.66 (140.00–150.00), 3 | 5.60 (5.00–5.80), 3 | 30.94 (29.00–31.00), 3 | "
            "7.55 (7.00–8.00), 3 | 217.60 (217.60–217.60), 1 | 4.77 |",
            "| lstm_varlen | 152 / 1120 | 122 / 560 | 1011 / 2729 | 622 / 1391 | 35642 / 296918 |",
            "| lstm_varlen | torch expandable | 5 | 0 (driver_calls, free_memory) | ok (2641 checked) |",
            "| lstm_varlen | vram paged | 5 | 0 (process) | ok (2641 checked) |",
        ]:
            self.assertIn(row, text)
        self.assertIn("36 runs (counts 8, timed 25, verify 3) on 2 traces, 3 timed rounds asked for.", text)

    def test_verdicts_from_the_fixture(self):
        text = render(load())
        self.assertEqual(verdict_line(text, "driver calls"),
                         "- **NOT MET** driver calls ≤ expandable segments' on every trace (exact counts): fails on "
                         "leak_retained_graph, lstm_varlen (leak_retained_graph 200 vs 117, lstm_varlen 4050 vs 586)")
        self.assertEqual(verdict_line(text, "total replay time"),
                         "- **NOT MET** total replay time ≤ expandable segments' on every trace (medians of ≥ 3 runs): "
                         "fails on lstm_varlen (leak_retained_graph 0.98, lstm_varlen 4.77)")
        self.assertIn("**NOT MET** p50 ≤ 100 ns and p99 ≤ 1 µs", verdict_line(text, "p50"))
        self.assertIn("(leak_retained_graph 72/51456 ns, lstm_varlen 152/1120 ns)", verdict_line(text, "p50"))
        self.assertEqual(verdict_line(text, "reserved/live ≤ 1.03"),
                         "- **MET** reserved/live ≤ 1.03 on every trace: every trace "
                         "(leak_retained_graph 1.0235, lstm_varlen 1.0047)")
        self.assertIn("**NOT MET** fragmentation lead kept", verdict_line(text, "fragmentation"))
        self.assertIn("fails on leak_retained_graph (", verdict_line(text, "fragmentation"))
        self.assertTrue(text.endswith("every run gave all device memory back and every verified allocation kept its "
                                      "contents."))

    def test_all_met(self):
        recs = load()
        for r in recs:
            if is_paged(r):
                lrg = r["trace"] == "leak_retained_graph"
                n = 30 if lrg else 150  # per kind: below expandable segments' 117 and 586 in all
                r["device_calls_by_kind"] = dict(r["device_calls_by_kind"], create=n, map=n, set_access=n,
                                                 unmap=0, release=0)
                r["total_seconds"] /= 10
                r["ns_per_op_p50"], r["ns_per_op_p99"] = 80, 900
                if lrg:
                    r["reserved_over_live"] = 1.0200
        text = render(recs)
        for start in ["driver calls", "total replay time", "p50", "reserved/live ≤ 1.03", "fragmentation"]:
            self.assertIn("- **MET** ", verdict_line(text, start))
        self.assertIn("(leak_retained_graph 92 vs 117, lstm_varlen 456 vs 586)", verdict_line(text, "driver calls"))

    def test_a_target_exactly_at_its_bound_is_met(self):
        recs = load()
        for r in recs:
            if is_paged(r):
                r["ns_per_op_p50"], r["ns_per_op_p99"] = 100, 1000
                r["reserved_over_live"] = 1.03
        text = render(recs)
        self.assertIn("- **MET** p50", verdict_line(text, "p50"))
        self.assertIn("- **MET** reserved/live", verdict_line(text, "reserved/live ≤ 1.03"))
        for r in recs:
            if is_paged(r):
                r["ns_per_op_p99"] = 1001
        self.assertIn("- **NOT MET** p50", verdict_line(render(recs), "p50"))

    def test_not_measured(self):
        recs = []
        for r in load():
            if r.get("race") == "timed" and r.get("repeat") == 3:
                continue  # two timed rounds only
            if r.get("race") == "counts" and "mode" in r:
                r = dict(r, driver_calls=None, driver_calls_teardown=None, driver_unreleased=None,
                         driver_calls_error="built without CUPTI", device_check="free_memory", device_leaked_bytes=0)
            recs.append(r)
        text = render(recs, TRACES + ["kvgen"])
        self.assertIn("| lstm_varlen | torch expandable | not counted (built without CUPTI) | | | | | | | | | –|", text)
        self.assertEqual(verdict_line(text, "driver calls"),
                         "- **NOT MEASURED** driver calls ≤ expandable segments' on every trace (exact counts): "
                         "no figures; not measured on leak_retained_graph, lstm_varlen, kvgen")
        # Two runs are too few for the time verdict, and kvgen has none.
        self.assertIn("**NOT MEASURED** total replay time", verdict_line(text, "total replay time"))
        self.assertIn("not measured on leak_retained_graph, lstm_varlen, kvgen", verdict_line(text, "total replay time"))
        self.assertIn("| leak_retained_graph | 3.95 (3.90–4.00), 2 |", text)
        self.assertEqual(verdict_line(text, "reserved/live ≤ 1.03"),
                         "- **NOT MEASURED** reserved/live ≤ 1.03 on every trace: all measured traces pass; not "
                         "measured on kvgen (leak_retained_graph 1.0235, lstm_varlen 1.0047)")
        self.assertIn("| kvgen | – | – | – | – | – | – | – | – |", text)

    def test_leaks_and_lost_contents_are_shown(self):
        recs = load()
        for r in recs:
            if r.get("race") == "counts" and is_expandable(r) and r["trace"].endswith("lstm_varlen.csv"):
                r["driver_unreleased"] = {"allocations": 0, "handles": 2, "mappings": 2, "address_ranges": 1}
            if r.get("race") == "verify" and is_paged(r):
                r["verify_mismatches"] = 3
            if r.get("race") == "timed" and r.get("policy") == "default" and r["trace"] == "leak_retained_graph":
                r["device_leaked_bytes"] = 2097152
        text = render(recs)
        self.assertIn("| lstm_varlen | torch expandable | 5 | **2 handles, 2 mappings not given back** "
                      "(driver_calls, free_memory) | ok (2641 checked) |", text)
        self.assertIn("| lstm_varlen | vram paged | 5 | 0 (process) | **3 of 2641 lost** |", text)
        self.assertIn("| leak_retained_graph | vram default | 4 | **2097152 B; 2097152 B; 2097152 B** (process) | – |", text)
        self.assertTrue(text.endswith("**3 allocator rows found memory not given back or lost contents** "
                                      "(table above)."))

    def test_records_that_differ_are_flagged(self):
        recs = load()
        for r in recs:
            if is_expandable(r) and r.get("repeat") == 2 and r["trace"].endswith("lstm_varlen.csv"):
                r["ops"] = 5000
        self.assertIn("| **no**: 5000 ops, 5212267592 B live, 5284 ops, 5212267592 B live |", render(recs))

    def test_vram_alone_on_the_simulated_device(self):
        # VRAM_REPLAY_DEVICE=sim without PyTorch: the harness's rows are missing.
        recs = [r for r in load() if "policy" in r]
        text = render(recs)
        self.assertIn("| leak_retained_graph | 1611 | 805 | 1.0235 | 1.0061 | – | – | – | yes (8 runs) |", text)
        self.assertIn("| lstm_varlen | 4050 | – | – | 22 | – |", text)
        self.assertIn("**NOT MEASURED** driver calls", verdict_line(text, "driver calls"))
        self.assertIn("**MET** reserved/live ≤ 1.03", verdict_line(text, "reserved/live ≤ 1.03"))
        self.assertNotIn("torch expandable | not counted", text)

    def test_lines_without_race_keys(self):
        # Lines of the earlier script: every run is timed and gives figures.
        recs = []
        for r in load():
            if r.get("race") in ("timed", "counts"):
                r = {k: v for k, v in r.items() if k not in ("race", "repeat")}
            recs.append(r)
        text = render(recs)
        self.assertIn("| leak_retained_graph | 1611 | 805 | 1.0235 |", text)
        self.assertIn("| leak_retained_graph | 200 | 117 | 1.71 | 16 | 16 |", text)
        # The counts runs now count as timed runs too: four each.
        self.assertIn("| leak_retained_graph | 4.10 (3.90–4.80), 4 |", text)


class MainTest(unittest.TestCase):
    def run_main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = rs.main(["replay_summary.py"] + list(args))
        return rc, out.getvalue(), err.getvalue()

    def write(self, text):
        f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        self.addCleanup(os.remove, f.name)
        f.write(text)
        f.close()
        return f.name

    def test_fixture(self):
        rc, out, err = self.run_main("--traces", ",".join(TRACES), "--repeats", "3", FIXTURE)
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("## Against issue 12", out)

    def test_bad_line(self):
        with open(FIXTURE) as f:
            path = self.write(f.read() + "not json\n[1]\n")
        rc, out, err = self.run_main(path)
        self.assertEqual(rc, 1)
        self.assertIn("Input: line 37 is not a JSON object", out)
        self.assertIn("Input: line 38 is not a JSON object (not an object).", out)
        self.assertIn("2 lines of", err)
        self.assertIn("| lstm_varlen | 4050 | 586 | 6.91 | 22 | 22 |", out)

    def test_empty_and_missing(self):
        rc, out, err = self.run_main(self.write(""))
        self.assertEqual(rc, 1)
        self.assertIn("no results in", err)
        rc, out, err = self.run_main("/nonexistent/replay.jsonl")
        self.assertEqual(rc, 1)
        self.assertIn("No such file", err)

    def test_usage(self):
        for args in [(), ("--repeats", "x", FIXTURE), ("--what", FIXTURE), (FIXTURE, FIXTURE)]:
            rc, out, err = self.run_main(*args)
            self.assertEqual(rc, 2, args)
            self.assertIn("usage:", err)


if __name__ == "__main__":
    unittest.main()
