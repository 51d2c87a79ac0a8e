/*
 * Peer baseline for docs/PERFORMANCE.md: a sparse allreduce written the way
 * Horovod and PyTorch's Gloo backend do it, by hand with Open MPI:
 * MPI_Allgather of the nonzero counts, MPI_Allgatherv of every rank's
 * indices and values, then a local scatter-add into a dense result.
 * Timed like `sparcml bench`: barrier before each iteration, iteration time
 * = max over ranks, median over iterations. Each rank's support is the one
 * `sparcml bench --op sparse-allreduce --seed 1 --dist DIST` gives it (the
 * same generator, so both move the same nonzeros): "uniform" keeps each
 * index with probability d; "powerlaw" draws d*n indices n*u^3 (u uniform
 * in [0,1)), duplicates combined.
 *
 *   mpicc -O2 -o sparse_allgatherv sparse_allgatherv.c
 *   mpirun --allow-run-as-root --oversubscribe -np 4 \
 *     --mca btl tcp,self --mca btl_tcp_if_include lo --mca pml ob1 \
 *     ./sparse_allgatherv 16777216 0.01 20 5 [uniform|powerlaw]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix(uint64_t *x) {
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static int cmpu32(const void *a, const void *b) {
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static int cmpd(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	long n = argc > 1 ? atol(argv[1]) : 16777216;
	double density = argc > 2 ? atof(argv[2]) : 0.01;
	int iters = argc > 3 ? atoi(argv[3]) : 20;
	int warmup = argc > 4 ? atoi(argv[4]) : 5;

	const char *dist = argc > 5 ? argv[5] : "uniform";
	if (strcmp(dist, "uniform") != 0 && strcmp(dist, "powerlaw") != 0) {
		if (rank == 0)
			fprintf(stderr, "unknown distribution %s (want uniform or powerlaw)\n", dist);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}

	/* This rank's support, as sparcml bench's sparseInput with seed 1. */
	uint64_t seed = 1;
	uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)(rank + 1) * 0xD1B54A32D192ED03ull;
	long cap, k = 0;
	uint32_t *idx;
	float *val;
	if (strcmp(dist, "powerlaw") == 0) {
		long draws = (long)(density * (double)n);
		cap = draws + 1;
		idx = malloc(cap * sizeof(uint32_t));
		val = malloc(cap * sizeof(float));
		for (long i = 0; i < draws; i++) {
			double u = (double)(splitmix(&x) >> 11) / 9007199254740992.0;
			double v = (double)n * u * u * u;
			idx[i] = (uint32_t)(v < (double)(n - 1) ? v : (double)(n - 1));
			splitmix(&x); /* the value's draw */
		}
		qsort(idx, draws, sizeof(uint32_t), cmpu32);
		for (long i = 0; i < draws; i++)
			if (k == 0 || idx[i] != idx[k - 1])
				idx[k++] = idx[i];
		for (long i = 0; i < k; i++)
			val[i] = (float)(i % 8 + 1);
	} else {
		cap = (long)(n * density * 1.2) + 16;
		idx = malloc(cap * sizeof(uint32_t));
		val = malloc(cap * sizeof(float));
		uint64_t threshold = (uint64_t)(density * 18446744073709551615.0);
		for (long i = 0; i < n && k < cap; i++)
			if (density > 0 && splitmix(&x) <= threshold) {
				idx[k] = (uint32_t)i;
				val[k] = (float)(splitmix(&x) % 8 + 1);
				k++;
			}
	}

	int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
	float *dense = malloc(n * sizeof(float));
	double *t = calloc(iters, sizeof(double));
	uint32_t *allidx = NULL;
	float *allval = NULL;
	long total = 0;
	for (int it = -warmup; it < iters; it++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		int kk = (int)k;
		MPI_Allgather(&kk, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
		total = 0;
		for (int r = 0; r < size; r++) {
			displs[r] = (int)total;
			total += counts[r];
		}
		if (!allidx) {
			allidx = malloc(total * sizeof(uint32_t));
			allval = malloc(total * sizeof(float));
		}
		MPI_Allgatherv(idx, kk, MPI_UINT32_T, allidx, counts, displs, MPI_UINT32_T, MPI_COMM_WORLD);
		MPI_Allgatherv(val, kk, MPI_FLOAT, allval, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
		memset(dense, 0, n * sizeof(float));
		for (long i = 0; i < total; i++)
			dense[allidx[i]] += allval[i];
		double d = MPI_Wtime() - t0;
		if (it >= 0)
			t[it] = d;
	}
	MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	if (rank == 0) {
		qsort(t, iters, sizeof(double), cmpd);
		double med = iters % 2 ? t[iters / 2] : (t[iters / 2 - 1] + t[iters / 2]) / 2;
		printf("{\"op\":\"sparse-allreduce\",\"impl\":\"openmpi-tcp-allgatherv\",\"np\":%d,\"n\":%ld,"
		       "\"density\":%g,\"dist\":\"%s\",\"nnz_in\":%ld,\"nnz_gathered\":%ld,\"time_us_min\":%.1f,"
		       "\"time_us_median\":%.1f,\"time_us_max\":%.1f}\n",
		       size, n, density, dist, k, total, t[0] * 1e6, med * 1e6, t[iters - 1] * 1e6);
	}
	MPI_Finalize();
	return 0;
}
