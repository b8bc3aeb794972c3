// Cost of one libvram allocate+free pair (vram_try_malloc / vram_try_free,
// one C-to-Go call each) when the calls come with idle time between them,
// as they do inside real training (kernel launches and waits on the GPU
// between allocations), on the device the library is set up for.
//
//   cc -O2 -o callgap callgap.c -ldl && ./callgap LIBVRAM_SO [PAIRS]
//
// For each gap (busy-waited on the calling thread, not timed), PAIRS pairs
// of a 4 KiB allocation, through PyTorch's pair (vram_malloc / vram_free,
// whose frees are queued and made by the next allocation) and through the
// pair that enters Go on every call (vram_try_malloc / vram_try_free);
// prints the mean, median and 90th percentile ns per pair.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void *(*malloc_fn)(size_t, int, void *);
typedef int (*free_fn)(void *, int);
typedef void (*torch_free_fn)(void *, size_t, int, void *);

static free_fn try_free;
static torch_free_fn torch_free;
static int torch_pair;

static int release(void *p) {
  if (torch_pair) {
    torch_free(p, 4096, 0, NULL);
    return 0;
  }
  return try_free(p, 0);
}

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void spin(long long ns) {
  long long end = now_ns() + ns;
  while (now_ns() < end) {
  }
}

static int cmp(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: callgap LIBVRAM_SO [PAIRS]\n");
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  malloc_fn try_malloc = (malloc_fn)dlsym(h, "vram_try_malloc");
  malloc_fn torch_malloc = (malloc_fn)dlsym(h, "vram_malloc");
  try_free = (free_fn)dlsym(h, "vram_try_free");
  torch_free = (torch_free_fn)dlsym(h, "vram_free");
  if (!try_malloc || !torch_malloc || !try_free || !torch_free) {
    fprintf(stderr, "%s: not a libvram\n", argv[1]);
    return 1;
  }
  int pairs = argc > 2 ? atoi(argv[2]) : 2000;
  long long gaps[] = {0, 5000, 20000, 100000, 500000, 2000000, 12000000};
  long long *t = malloc(sizeof(long long) * pairs);
  for (torch_pair = 1; torch_pair >= 0; torch_pair--) {
  malloc_fn m = torch_pair ? torch_malloc : try_malloc;
  printf("%s\n", torch_pair ? "vram_malloc / vram_free (PyTorch's pair)" : "vram_try_malloc / vram_try_free");
  for (int g = 0; g < (int)(sizeof gaps / sizeof gaps[0]); g++) {
    int n = gaps[g] >= 2000000 ? pairs / 10 : pairs;
    long long sum = 0;
    for (int i = 0; i < n; i++) {
      spin(gaps[g]);
      long long t0 = now_ns();
      void *p = m(4096, 0, NULL);
      if (!p) {
        fprintf(stderr, "allocation failed\n");
        return 1;
      }
      release(p);
      t[i] = now_ns() - t0;
      sum += t[i];
    }
    qsort(t, n, sizeof t[0], cmp);
    printf("gap %8lld ns: mean %7.0f ns, median %6lld ns, p90 %7lld ns per pair (%d pairs)\n", gaps[g],
           (double)sum / n, t[n / 2], t[n * 9 / 10], n);
  }
  }
  return 0;
}
