/* The driver floor measured natively, to run side by side with
 * BenchmarkGPUMemAllocFree and BenchmarkGPUCallOverhead (docs/cuda.md):
 * each call is timed on its own with clock_gettime, after a warm-up.
 *   gcc -O2 -I<toolkit>/include floor.c <path of libcuda.so.1> -o floor && ./floor 3000 1000000 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void report(const char *what, double *d, int n) {
	qsort(d, n, sizeof *d, cmp);
	printf("%-34s n=%-8d p50 %9.0f ns  p99 %9.0f ns\n", what, n, d[(int)(0.50 * (n - 1))], d[(int)(0.99 * (n - 1))]);
}

#define CHECK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
	const char *s_; cuGetErrorName(r_, &s_); fprintf(stderr, "%s: %s\n", #x, s_); exit(1); } } while (0)

int main(int argc, char **argv) {
	int iters = argc > 1 ? atoi(argv[1]) : 3000;
	int calls = argc > 2 ? atoi(argv[2]) : 1000000;
	CUdevice dev;
	CUcontext ctx;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));

	double *a = malloc(sizeof(double) * (iters > calls ? iters : calls));
	double *f = malloc(sizeof(double) * iters);
	size_t sizes[] = {512, 1 << 20, 2 << 20, 20 << 20, (size_t)1 << 30};
	const char *names[] = {"512B", "1MiB", "2MiB", "20MiB", "1GiB"};
	for (int s = 0; s < 5; s++) {
		CUdeviceptr p;
		for (int i = 0; i < 20; i++) {
			CHECK(cuMemAlloc(&p, sizes[s]));
			CHECK(cuMemFree(p));
		}
		for (int i = 0; i < iters; i++) {
			double t0 = now_ns();
			CHECK(cuMemAlloc(&p, sizes[s]));
			double t1 = now_ns();
			CHECK(cuMemFree(p));
			double t2 = now_ns();
			a[i] = t1 - t0;
			f[i] = t2 - t1;
		}
		char buf[64];
		snprintf(buf, sizeof buf, "cuMemAlloc_v2 %s", names[s]);
		report(buf, a, iters);
		snprintf(buf, sizeof buf, "cuMemFree_v2 %s", names[s]);
		report(buf, f, iters);
	}

	/* Trivial calls: batches of 100 timed together, per-call figure. */
	int batches = calls / 100;
	int v;
	CUcontext cur;
	for (int b = 0; b < batches; b++) {
		double t0 = now_ns();
		for (int i = 0; i < 100; i++) cuDriverGetVersion(&v);
		a[b] = (now_ns() - t0) / 100;
	}
	report("cuDriverGetVersion (per call)", a, batches);
	for (int b = 0; b < batches; b++) {
		double t0 = now_ns();
		for (int i = 0; i < 100; i++) cuCtxSetCurrent(ctx);
		a[b] = (now_ns() - t0) / 100;
	}
	report("cuCtxSetCurrent (per call)", a, batches);
	for (int b = 0; b < batches; b++) {
		double t0 = now_ns();
		for (int i = 0; i < 100; i++) {
			cuCtxSetCurrent(ctx);
			cuCtxGetCurrent(&cur);
		}
		a[b] = (now_ns() - t0) / 100;
	}
	report("cuCtxSetCurrent+cuCtxGetCurrent", a, batches);
	size_t fr, tot;
	for (int b = 0; b < batches / 10; b++) {
		double t0 = now_ns();
		for (int i = 0; i < 100; i++) cuMemGetInfo(&fr, &tot);
		a[b] = (now_ns() - t0) / 100;
	}
	report("cuMemGetInfo_v2 (per call)", a, batches / 10);
	CHECK(cuDevicePrimaryCtxRelease(dev));
	return 0;
}
