"""Threads allocating at once, and fork."""

import json
import random
import threading
import unittest

from _support import MiB, LibraryTest, check_python, vram

DEV_THREADS = 6


def rounded(n):
    """The allocator's rounding: at least 512 bytes, a multiple of 512."""
    return max(512, (n + 511) // 512 * 512)


class ThreadsTest(LibraryTest):
    def test_concurrent_malloc_free_exact_stats(self):
        d = DEV_THREADS
        threads, ops, keep = 8, 400, 5
        results = [None] * threads
        errors = []
        start = threading.Barrier(threads)

        def work(i):
            rng = random.Random(i)
            live, mallocs, frees = [], 0, 0
            try:
                start.wait()
                for _ in range(ops):
                    if live and rng.random() < 0.45:
                        ptr, _ = live.pop(rng.randrange(len(live)))
                        vram.free(ptr, device=d)
                        frees += 1
                    else:
                        size = rng.choice((1, 511, 513, 4000, 70000, 1 << 20, (1 << 20) + 1, 3 << 20))
                        live.append((vram.malloc(size, device=d, stream=0), size))
                        mallocs += 1
                while len(live) > keep:
                    vram.free(live.pop()[0], device=d)
                    frees += 1
            except Exception as e:  # reported by the main thread
                errors.append(e)
            results[i] = (live, mallocs, frees)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])

        live = [x for r in results for x in r[0]]
        mallocs = sum(r[1] for r in results)
        frees = sum(r[2] for r in results)
        spans = sorted((p, p + n) for p, n in live)
        for (a0, a1), (b0, _) in zip(spans, spans[1:]):
            self.assertLessEqual(a1, b0, "two live blocks overlap")

        s = vram.memory_stats(d)
        self.assertEqual(s["allocation.all.current"], len(live))
        self.assertEqual(s["allocation.all.allocated"], mallocs)
        self.assertEqual(s["allocation.all.freed"], frees)
        self.assertEqual(s["requested_bytes.all.current"], sum(n for _, n in live))
        # Small-pool blocks are split whenever 512 bytes or more would remain,
        # so their sizes are exact; a large-pool block keeps a remainder of up
        # to 1 MiB unsplit, which depends on which cached block served it.
        small = [rounded(n) for _, n in live if n <= MiB]
        large = [rounded(n) for _, n in live if n > MiB]
        self.assertEqual(s["allocated_bytes.small_pool.current"], sum(small))
        self.assertGreaterEqual(s["allocated_bytes.large_pool.current"], sum(large))
        self.assertLessEqual(s["allocated_bytes.large_pool.current"], sum(large) + len(large) * MiB)

        for p, _ in live:
            vram.free(p, device=d)
        vram.empty_cache(d)
        s = vram.memory_stats(d)
        self.assertEqual(s["allocated_bytes.all.current"], 0)
        self.assertEqual(s["reserved_bytes.all.current"], 0)
        self.assertEqual(s["allocation.all.freed"], mallocs)

    def test_errors_belong_to_their_thread(self):
        # One thread's failure must not leak its message into another's.
        d = DEV_THREADS
        barrier = threading.Barrier(2)
        seen = {}

        def bad():
            barrier.wait()
            for _ in range(200):
                try:
                    vram.free(1 << 44, device=d)
                except vram.Error as e:
                    seen.setdefault("bad", str(e))

        def good():
            barrier.wait()
            for _ in range(200):
                vram.free(vram.malloc(1000, device=d), device=d)
            seen["good"] = "ok"

        ts = [threading.Thread(target=bad), threading.Thread(target=good)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(seen.get("good"), "ok")
        self.assertIn(hex(1 << 44), seen.get("bad", ""))


class ForkTest(LibraryTest):
    def test_child_cannot_use_the_library_and_parent_is_intact(self):
        # Runs in its own process so that a child stuck in the library
        # becomes a timeout, not a hung test run.
        out = check_python(self, """
            import json, os, vram
            p = vram.malloc(3 << 20)
            before = vram.memory_stats()
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                out = {}
                try:
                    vram.malloc(10)
                    out["malloc"] = "no error"
                except vram.Error as e:
                    out["malloc"] = str(e)
                try:
                    vram.free(p)
                    out["free"] = "ok"
                except Exception as e:
                    out["free"] = repr(e)
                for name, call in (("stats", vram.memory_stats), ("summary", vram.memory_summary),
                                   ("info", vram.info), ("empty_cache", vram.empty_cache)):
                    try:
                        call()
                        out[name] = "no error"
                    except vram.Error as e:
                        out[name] = str(e)
                # The library's own guard, below the package's.
                lib = vram._lib._lib
                out["raw_malloc"] = lib.vram_try_malloc(10, 0, None)
                out["raw_error"] = lib.vram_last_error().decode()
                out["raw_free"] = lib.vram_try_free(p, 0)
                out["raw_stats"] = lib.vram_stats_json(0)
                os.write(w, json.dumps(out).encode())
                os._exit(0)
            os.close(w)
            data = b""
            while True:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                data += chunk
            _, status = os.waitpid(pid, 0)
            child = json.loads(data)
            child["status"] = status
            child["parent_stats_intact"] = vram.memory_stats() == before
            q = vram.malloc(1000)
            vram.free(q)
            vram.free(p)
            child["parent_after"] = vram.memory_allocated()
            print(json.dumps(child))
        """, timeout=60)
        child = json.loads(out)
        self.assertEqual(child["status"], 0)
        for name in ("malloc", "stats", "summary", "info", "empty_cache"):
            with self.subTest(call=name):
                self.assertIn("forked from pid", child[name])
                self.assertIn("spawn", child[name])
        self.assertEqual(child["free"], "ok")
        self.assertIsNone(child["raw_malloc"])
        self.assertIn("forked", child["raw_error"])
        self.assertEqual(child["raw_free"], 0)
        self.assertIsNone(child["raw_stats"])
        self.assertTrue(child["parent_stats_intact"])
        self.assertEqual(child["parent_after"], 0)


if __name__ == "__main__":
    unittest.main()
