/*
 * bench.c: times blocking float32 allreduces through the C ABI exactly as
 * capi/bench (Go) and python/tools/bench.py (Python) time theirs: per
 * iteration a barrier, then one timed sparcml_allreduce; each iteration's
 * time is the slowest rank's, and the median is printed as JSON.
 *
 *   sparcml run -n 2 -- build/test/cbench ITERS N
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sparcml.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s ITERS N\n", argv[0]);
		return 2;
	}
	int iters = atoi(argv[1]), warmup = iters / 10 + 1;
	size_t n = (size_t)atol(argv[2]);
	sparcml_comm *comm;
	if (sparcml_init(&comm) != SPARCML_OK) {
		fprintf(stderr, "%s\n", sparcml_last_error());
		return 1;
	}
	float *data = malloc((n ? n : 1) * sizeof *data);
	double *times = calloc((size_t)iters, sizeof *times);
	for (int it = -warmup; it < iters; it++) {
		for (size_t i = 0; i < n; i++)
			data[i] = 1;
		if (sparcml_barrier(comm) != SPARCML_OK)
			return 1;
		double t0 = now();
		if (sparcml_allreduce(comm, data, n, SPARCML_FLOAT32, SPARCML_SUM) != SPARCML_OK) {
			fprintf(stderr, "%s\n", sparcml_last_error());
			return 1;
		}
		if (it >= 0)
			times[it] = now() - t0;
	}
	if (sparcml_allreduce(comm, times, (size_t)iters, SPARCML_FLOAT64, SPARCML_MAX) != SPARCML_OK)
		return 1;
	qsort(times, (size_t)iters, sizeof *times, by_value);
	if (sparcml_rank(comm) == 0)
		printf("{\"binding\":\"c\",\"op\":\"allreduce\",\"np\":%d,\"n\":%zu,\"iters\":%d,"
		       "\"time_us_median\":%.3f,\"time_us_min\":%.3f}\n",
		       sparcml_size(comm), n, iters, times[iters / 2] * 1e6, times[0] * 1e6);
	free(data);
	free(times);
	return sparcml_finalize(comm) != SPARCML_OK;
}
