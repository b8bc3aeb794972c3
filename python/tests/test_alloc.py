"""vram's allocation, statistics, summary and snapshot functions on the simulated device.

Expected sizes follow the allocator's documented policy (alloc/doc.go):
requests are rounded up to a multiple of 512 bytes; requests of at most
1 MiB come from 2 MiB small-pool segments; larger ones under 10 MiB from
20 MiB segments, the rest from segments of the request rounded up to 2 MiB.
"""

import os
import pickle
import tempfile
import unittest

from _support import MiB, LibraryTest, check_python, need_library, run_python, vram

# Device indexes: each test class that checks exact numbers owns one.
DEV_BASIC, DEV_STATS, DEV_SNAPSHOT, DEV_ERRORS, DEV_SUMMARY = 1, 2, 3, 4, 5


class AllocTest(LibraryTest):
    def test_malloc_free_round_trip(self):
        p = vram.malloc(4096, device=DEV_BASIC)
        self.assertIsInstance(p, int)
        self.assertNotEqual(p, 0)
        q = vram.malloc(4096, device=DEV_BASIC)
        self.assertNotEqual(p, q)
        self.assertGreaterEqual(abs(q - p), 4096, "blocks overlap")
        vram.free(p, device=DEV_BASIC)
        vram.free(q, device=DEV_BASIC)
        # The cache serves the same size again without growing.
        reserved = vram.memory_reserved(DEV_BASIC)
        r = vram.malloc(4096, device=DEV_BASIC)
        self.assertEqual(vram.memory_reserved(DEV_BASIC), reserved)
        vram.free(r, device=DEV_BASIC)

    def test_size_zero_and_free_zero(self):
        self.assertEqual(vram.malloc(0, device=DEV_BASIC), 0)
        vram.free(0, device=DEV_BASIC)  # like free(NULL)

    def test_double_free_is_an_error_that_changes_nothing(self):
        p = vram.malloc(1000, device=DEV_ERRORS)
        before = vram.memory_stats(DEV_ERRORS)
        vram.free(p, device=DEV_ERRORS)
        with self.assertRaises(vram.Error) as cm:
            vram.free(p, device=DEV_ERRORS)
        self.assertNotIsInstance(cm.exception, vram.OutOfMemoryError)
        self.assertIn("double free", str(cm.exception))
        self.assertIn(hex(p), str(cm.exception))
        after = vram.memory_stats(DEV_ERRORS)
        self.assertEqual(after["allocation.all.current"], before["allocation.all.current"] - 1)
        self.assertEqual(after["allocation.all.freed"], before["allocation.all.freed"] + 1)

    def test_unknown_pointer(self):
        vram.malloc(512, device=DEV_ERRORS)
        with self.assertRaises(vram.Error):
            vram.free(12345 * 4096, device=DEV_ERRORS)

    def test_free_on_a_device_that_never_allocated(self):
        with self.assertRaises(vram.Error) as cm:
            vram.free(1 << 40, device=40)
        self.assertIn("device 40", str(cm.exception))

    def test_arguments_are_checked_before_the_call(self):
        cases = [
            (lambda: vram.malloc(-1), ValueError, "size must not be negative, got -1"),
            (lambda: vram.malloc(1 << 64), ValueError, "larger than 2**64-1"),
            (lambda: vram.malloc(1.5), TypeError, "size must be an integer, got 1.5"),
            (lambda: vram.malloc("10"), TypeError, "size must be an integer"),
            (lambda: vram.malloc(True), TypeError, "size must be an integer, got True"),
            (lambda: vram.malloc(10, device=-1), ValueError, "device must be a device index"),
            (lambda: vram.malloc(10, device=None), TypeError, "device must be a device index"),
            (lambda: vram.malloc(10, stream=-2), ValueError, "stream must be a stream handle"),
            (lambda: vram.free(-5), ValueError, "ptr must be a device address"),
            (lambda: vram.memory_stats("cuda:0"), TypeError, "device must be an integer"),
            (lambda: vram.set_memory_fraction(0), ValueError, "fraction must be in (0, 1], got 0"),
            (lambda: vram.set_memory_fraction(1.5), ValueError, "got 1.5"),
            (lambda: vram.set_memory_fraction("half"), TypeError, "fraction must be a number"),
            (lambda: vram.set_limit(-1), ValueError, "nbytes must not be negative"),
            (lambda: vram.configure(None), TypeError, "conf must be a str"),
        ]
        for fn, exc, text in cases:
            with self.subTest(text=text):
                with self.assertRaises(exc) as cm:
                    fn()
                self.assertIn(text, str(cm.exception))

    def test_device_out_of_the_library_range(self):
        with self.assertRaises(vram.Error) as cm:
            vram.malloc(10, device=64)
        self.assertIn("device 64 is out of range", str(cm.exception))

    def test_stream_objects(self):
        class TorchLikeStream:
            cuda_stream = 0x1234

        class CupyLikeStream:
            ptr = 0x5678

        for s in (TorchLikeStream(), CupyLikeStream(), None, 0x9abc):
            with self.subTest(stream=s):
                p = vram.malloc(2048, device=DEV_BASIC, stream=s)
                vram.free(p, device=DEV_BASIC)

    def test_record_stream(self):
        p = vram.malloc(2048, device=DEV_BASIC, stream=0)
        vram.record_stream(p, 0x77, device=DEV_BASIC)
        vram.free(p, device=DEV_BASIC)
        with self.assertRaises(vram.Error):
            vram.record_stream(p, 0x77, device=DEV_BASIC)

    def test_info(self):
        vram.malloc(512, device=DEV_BASIC)
        info = vram.info()
        self.assertEqual(set(info) - {"channel_error"}, {"version", "backend", "pid", "devices", "config", "channel"})
        self.assertEqual(info["backend"], "sim")
        self.assertEqual(vram.backend(), "sim")
        self.assertEqual(info["pid"], os.getpid())
        self.assertIn(DEV_BASIC, info["devices"])
        self.assertIsInstance(vram.version(), str)
        self.assertTrue(vram.version())
        self.assertEqual(info["config"], vram.config())
        # The statistics channel (docs/channel.md): one 0600 file per device
        # with an allocator, unless VRAM_CHANNEL_DIR=off or it could not be made.
        if "channel_error" not in info and os.environ.get("VRAM_CHANNEL_DIR") != "off":
            name = "vram-stats.%d.%d" % (os.getpid(), DEV_BASIC)
            paths = [p for p in info["channel"] if os.path.basename(p) == name]
            self.assertEqual(len(paths), 1, info["channel"])
            self.assertEqual(os.stat(paths[0]).st_mode & 0o777, 0o600)


class StatsTest(LibraryTest):
    """Exact figures on a device no other test uses, in the order written."""

    def test_exact(self):
        d = DEV_STATS
        s = vram.memory_stats(d)
        self.assertEqual(list(s), sorted(s), "memory_stats is not sorted by key")
        self.assertIsInstance(s, __import__("collections").OrderedDict)
        self.assertEqual(s["allocated_bytes.all.current"], 0, "a fresh device reports zeros")
        self.assertEqual(s["reserved_bytes.all.current"], 0)

        small = vram.malloc(1000, device=d)        # 1024 B, a 2 MiB small segment
        mid = vram.malloc(4 * MiB, device=d)       # a 20 MiB large segment
        big = vram.malloc(30 * MiB, device=d)      # its own 30 MiB segment
        alloc = 1024 + 4 * MiB + 30 * MiB
        reserved = 2 * MiB + 20 * MiB + 30 * MiB
        s = vram.memory_stats(d)
        want = {
            "allocated_bytes.all.current": alloc,
            "allocated_bytes.small_pool.current": 1024,
            "allocated_bytes.large_pool.current": 34 * MiB,
            "requested_bytes.all.current": 1000 + 34 * MiB,
            "reserved_bytes.all.current": reserved,
            "reserved_bytes.small_pool.current": 2 * MiB,
            "segment.all.current": 3,
            "allocation.all.current": 3,
            "allocation.all.allocated": 3,
            "active_bytes.all.current": alloc,
        }
        self.assertEqual({k: s[k] for k in want}, want)
        self.assertEqual(vram.memory_allocated(d), alloc)
        self.assertEqual(vram.memory_reserved(d), reserved)

        vram.free(mid, device=d)
        self.assertEqual(vram.memory_allocated(d), alloc - 4 * MiB)
        self.assertEqual(vram.memory_reserved(d), reserved, "a free keeps the memory cached")
        self.assertEqual(vram.max_memory_allocated(d), alloc)

        vram.empty_cache(d)  # mid's 20 MiB segment holds nothing now
        self.assertEqual(vram.memory_reserved(d), reserved - 20 * MiB)
        self.assertEqual(vram.max_memory_reserved(d), reserved)

        vram.free(small, device=d)
        vram.free(big, device=d)
        vram.empty_cache()  # every device
        s = vram.memory_stats(d)
        self.assertEqual(s["allocated_bytes.all.current"], 0)
        self.assertEqual(s["reserved_bytes.all.current"], 0)
        self.assertEqual(s["allocation.all.freed"], 3)
        self.assertEqual(s["allocated_bytes.all.peak"], alloc)

        vram.reset_peak_memory_stats(d)
        self.assertEqual(vram.max_memory_allocated(d), 0)
        self.assertEqual(vram.max_memory_reserved(d), 0)
        self.assertEqual(vram.memory_stats(d)["allocation.all.allocated"], 3)

        vram.reset_accumulated_memory_stats(d)
        s = vram.memory_stats(d)
        self.assertEqual(s["allocation.all.allocated"], 0)
        self.assertEqual(s["allocation.all.freed"], 0)
        self.assertEqual(s["allocated_bytes.all.allocated"], 0)


class SummaryTest(LibraryTest):
    def test_table_and_fragmentation_line(self):
        d = DEV_SUMMARY
        p = vram.malloc(4 * MiB, device=d)
        text = vram.memory_summary(d)
        for row in ("Allocated memory", "GPU reserved memory", "Non-releasable memory",
                    "Allocations", "from large pool", "from small pool", "Cur Usage",
                    "Peak Usage", "CUDA OOMs"):
            self.assertIn(row, text)
        frag = [line for line in text.splitlines() if "fragmented" in line]
        self.assertEqual(len(frag), 1, text)
        self.assertIn("largest free block 16.00 MiB", frag[0])  # 20 MiB segment less 4 MiB
        self.assertIn("4096 KiB", text)

        short = vram.memory_summary(d, abbreviated=True)
        self.assertNotIn("from large pool", short)
        self.assertNotIn("from small pool", short)
        self.assertIn("Allocated memory", short)
        self.assertIn("fragmented", short)
        self.assertLess(len(short.splitlines()), len(text.splitlines()))
        vram.free(p, device=d)

    def test_idle_device(self):
        self.assertIn("Allocated memory", vram.memory_summary(50))


class SnapshotTest(LibraryTest):
    def test_shape_and_pickle_round_trip(self):
        d = DEV_SNAPSHOT
        a = vram.malloc(3 * MiB, device=d)
        b = vram.malloc(700, device=d)
        snap = vram.snapshot()
        self.assertEqual(set(snap), {"segments", "device_traces", "allocator_settings"})
        self.assertIsInstance(snap["device_traces"], list)
        self.assertGreater(len(snap["device_traces"]), d)
        self.assertEqual(snap["allocator_settings"].get("allocator"), "vram")
        mine = [s for s in snap["segments"] if s["device"] == d]
        self.assertEqual(sum(s["total_size"] for s in mine), vram.memory_reserved(d))
        self.assertEqual(sum(s["allocated_size"] for s in mine), vram.memory_allocated(d))
        blocks = {blk["address"]: blk for s in mine for blk in s["blocks"]}
        self.assertEqual(blocks[a]["state"], "active_allocated")
        self.assertEqual(blocks[a]["requested_size"], 3 * MiB)
        self.assertEqual(blocks[b]["size"], 1024)
        for s in mine:
            self.assertEqual(sum(blk["size"] for blk in s["blocks"]), s["total_size"],
                             "blocks do not tile their segment")
            self.assertIn(s["segment_type"], ("small", "large"))

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "snap.pickle")
            vram.dump_snapshot(path)
            with open(path, "rb") as f:
                loaded = pickle.load(f)
        self.assertEqual(loaded, vram.snapshot())
        vram.free(a, device=d)
        vram.free(b, device=d)

    def test_trace_events(self):
        out = check_python(self, """
            import vram
            vram.configure("trace_events:100")
            p = vram.malloc(5000)
            vram.free(p)
            tr = vram.snapshot()["device_traces"][0]
            print([e["action"] for e in tr])
            print(tr[0]["addr"] == p, tr[0]["size"])
        """)
        self.assertEqual(out.splitlines(), ["['alloc', 'free_requested', 'free_completed']", "True 5000"])

    def test_no_trace_by_default(self):
        out = check_python(self, """
            import vram
            vram.free(vram.malloc(5000))
            print(vram.snapshot()["device_traces"])
        """, env={"VRAM_ALLOC_CONF": None})
        self.assertEqual(out.strip(), "[[]]")


class SettingsTest(LibraryTest):
    """Settings apply only to allocators not yet created: each case runs in
    its own process."""

    def test_out_of_memory_under_max_bytes(self):
        out = check_python(self, """
            import vram
            vram.configure("max_bytes:64MiB")
            p = vram.malloc(40 << 20)
            try:
                vram.malloc(40 << 20)
            except vram.OutOfMemoryError as e:
                assert isinstance(e, vram.Error) and isinstance(e, RuntimeError)
                assert isinstance(e, MemoryError)
                print(str(e).split(".")[0])
                print("allowed" in str(e), "64.00 MiB" in str(e))
            s = vram.memory_stats()
            print(s["num_ooms"], s["allocated_bytes.all.current"] == 40 << 20)
            vram.free(p)
            q = vram.malloc(40 << 20)  # fits once p is back
            print("ok")
        """)
        self.assertEqual(out.splitlines(), ["CUDA out of memory", "True True", "1 True", "ok"])

    def test_env_settings(self):
        out = check_python(self, """
            import vram
            print(vram.config())
            try:
                vram.malloc(9 << 20)
            except vram.OutOfMemoryError:
                print("oom")
        """, env={"VRAM_ALLOC_CONF": "max_bytes:8MiB"})
        self.assertEqual(out.splitlines(), ["max_bytes:8388608", "oom"])

    def test_configure_errors(self):
        out = check_python(self, """
            import vram
            for bad in ("max_bytes:lots", "no_such_key:1"):
                try:
                    vram.configure(bad)
                except vram.Error as e:
                    print(e)
            vram.configure("max_bytes:1GiB")
            vram.free(vram.malloc(100))
            vram.configure("max_bytes:1GiB")  # the settings in force: fine
            try:
                vram.configure("max_bytes:2GiB")
            except vram.Error as e:
                print(e)
        """)
        lines = out.splitlines()
        self.assertEqual(len(lines), 3, out)
        self.assertIn("max_bytes", lines[0])
        self.assertIn("no_such_key", lines[1])
        self.assertIn("before the first allocation", lines[2])

    def test_set_limit(self):
        out = check_python(self, """
            import vram
            vram.set_limit(32 << 20, device=0)   # before the allocator exists: kept
            try:
                vram.malloc(40 << 20)
            except vram.OutOfMemoryError:
                print("capped")
            p = vram.malloc(30 << 20)
            vram.set_limit(0)                      # no cap again
            q = vram.malloc(40 << 20)
            print(vram.memory_reserved() == 70 << 20)
            vram.set_limit(16 << 20, device=1)
            try:
                vram.malloc(20 << 20, device=1)
            except vram.OutOfMemoryError:
                print("device 1 capped")
            vram.free(vram.malloc(20 << 20, device=2))
            print("device 2 free")
        """)
        self.assertEqual(out.splitlines(), ["capped", "True", "device 1 capped", "device 2 free"])

    def test_set_memory_fraction(self):
        out = check_python(self, """
            import vram
            vram.set_memory_fraction(0.25)     # of a 1 GiB simulated device
            p = vram.malloc(200 << 20)
            try:
                vram.malloc(100 << 20)
            except vram.OutOfMemoryError as e:
                print("capped", "256.00 MiB allowed" in str(e))
            vram.set_memory_fraction(1.0)
            q = vram.malloc(100 << 20)
            print("raised")
        """, env={"VRAM_SIM_CAPACITY": "1GiB"})
        self.assertEqual(out.splitlines(), ["capped True", "raised"])

    def test_bad_environment_is_reported_by_every_call(self):
        r = run_python("""
            import vram
            try:
                vram.malloc(10)
            except vram.Error as e:
                print(e)
        """, env={"VRAM_ALLOC_CONF": "max_bytes:nope"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("VRAM_ALLOC_CONF", r.stdout)
        self.assertIn("max_bytes", r.stdout)


class LibraryNotFoundTest(unittest.TestCase):
    """Needs no library: the package must say where it looked."""

    def test_missing_library_names_both_places_and_the_build(self):
        r = run_python("""
            import vram
            try:
                vram.malloc(1)
            except vram.LibraryNotFound as e:
                assert isinstance(e, ImportError) and isinstance(e, vram.Error)
                print(e)
        """, env={"VRAM_LIBRARY": "/nonexistent/libvram.so"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("VRAM_LIBRARY=/nonexistent/libvram.so", r.stdout)
        self.assertIn(os.path.join("vram", "libvram.so"), r.stdout)
        self.assertIn("go build -buildmode=c-shared -o python/vram/libvram.so ./cmd/libvram", r.stdout)

    def test_import_works_without_the_library(self):
        r = run_python("import vram; print(vram.site_dir())",
                       env={"VRAM_LIBRARY": "/nonexistent/libvram.so"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip().endswith(os.path.join("vram", "_site")))

    def test_not_a_library(self):
        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(b"not an ELF file")
            f.flush()
            r = run_python("""
                import vram
                try:
                    vram.info()
                except vram.LibraryNotFound as e:
                    print(e)
            """, env={"VRAM_LIBRARY": f.name})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("cannot load " + f.name, r.stdout)


class MainTest(unittest.TestCase):
    """python -m vram."""

    def run_main(self, *args, env=None):
        return run_python("import runpy, sys; sys.argv[0] = 'vram'; runpy.run_module('vram', run_name='__main__')",
                          args=args, env=env)

    def test_site_dir_needs_no_library(self):
        r = self.run_main("site-dir", env={"VRAM_LIBRARY": "/nonexistent/libvram.so"})
        self.assertEqual((r.returncode, r.stdout.strip()), (0, vram.site_dir()), r.stderr)

    def test_info(self):
        need_library()
        r = self.run_main()
        self.assertEqual(r.returncode, 0, r.stderr)
        info = __import__("json").loads(r.stdout)
        self.assertEqual(info["backend"], "sim")
        self.assertEqual(info["library"], vram.library_path())

    def test_errors(self):
        r = self.run_main("info", env={"VRAM_LIBRARY": "/nonexistent/libvram.so"})
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("vram: VRAM_LIBRARY=/nonexistent/libvram.so"), r.stderr)
        for args in (("bogus",), ("summary", "x"), ("info", "extra")):
            with self.subTest(args=args):
                self.assertEqual(self.run_main(*args).returncode, 2)


if __name__ == "__main__":
    unittest.main()
