/*
 * Peer baseline for docs/PERFORMANCE.md: a sparse allreduce written the way
 * Horovod and PyTorch's Gloo backend do it, by hand with Open MPI:
 * MPI_Allgather of the nonzero counts, MPI_Allgatherv of every rank's
 * indices and values, then a local scatter-add into a dense result.
 * Timed like `sparcml bench`: barrier before each iteration, iteration time
 * = max over ranks, median over iterations. Indices uniform without
 * repetition per rank (density d of n).
 *
 *   mpicc -O2 -o sparse_allgatherv sparse_allgatherv.c
 *   mpirun --allow-run-as-root --oversubscribe -np 4 \
 *     --mca btl tcp,self --mca btl_tcp_if_include lo --mca pml ob1 \
 *     ./sparse_allgatherv 16777216 0.01 20 5
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

	/* This rank's support: each index kept with probability density. */
	uint64_t seed = 1234567ull * (rank + 1);
	long cap = (long)(n * density * 1.2) + 16, k = 0;
	uint32_t *idx = malloc(cap * sizeof(uint32_t));
	float *val = malloc(cap * sizeof(float));
	uint64_t threshold = (uint64_t)(density * 18446744073709551615.0);
	for (long i = 0; i < n && k < cap; i++)
		if (splitmix(&seed) < threshold) {
			idx[k] = (uint32_t)i;
			val[k] = (float)((long)(splitmix(&seed) % 9) - 4);
			k++;
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
		       "\"density\":%g,\"nnz_in\":%ld,\"nnz_gathered\":%ld,\"time_us_min\":%.1f,"
		       "\"time_us_median\":%.1f,\"time_us_max\":%.1f}\n",
		       size, n, density, k, total, t[0] * 1e6, med * 1e6, t[iters - 1] * 1e6);
	}
	MPI_Finalize();
	return 0;
}
