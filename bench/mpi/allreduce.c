/*
 * Peer baseline for docs/PERFORMANCE.md: MPI_Allreduce (float32 sum) timed
 * the way `sparcml bench` times its own: a barrier before each iteration,
 * an iteration's time is the maximum over ranks, median over iterations.
 *
 *   mpicc -O2 -o allreduce allreduce.c
 *   mpirun --allow-run-as-root --oversubscribe -np 4 \
 *     --mca btl tcp,self --mca btl_tcp_if_include lo --mca pml ob1 \
 *     ./allreduce 16777216 20 5
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	long n = argc > 1 ? atol(argv[1]) : 16777216;
	int iters = argc > 2 ? atoi(argv[2]) : 20;
	int warmup = argc > 3 ? atoi(argv[3]) : 5;
	float *buf = malloc(n * sizeof(float));
	double *t = calloc(iters, sizeof(double));
	for (long i = 0; i < n; i++)
		buf[i] = (float)((i + rank) % 9 - 4);
	for (int it = -warmup; it < iters; it++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		double d = MPI_Wtime() - t0;
		if (it >= 0)
			t[it] = d;
	}
	MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	if (rank == 0) {
		qsort(t, iters, sizeof(double), cmp);
		double med = iters % 2 ? t[iters / 2] : (t[iters / 2 - 1] + t[iters / 2]) / 2;
		double bytes = (double)n * sizeof(float);
		double algbw = bytes / med / 1e9;
		printf("{\"op\":\"allreduce\",\"impl\":\"openmpi-tcp\",\"np\":%d,\"n\":%ld,\"dtype\":\"float32\","
		       "\"time_us_min\":%.1f,\"time_us_median\":%.1f,\"time_us_max\":%.1f,"
		       "\"algbw_gbps\":%.3f,\"busbw_gbps\":%.3f}\n",
		       size, n, t[0] * 1e6, med * 1e6, t[iters - 1] * 1e6, algbw,
		       algbw * 2.0 * (size - 1) / size);
	}
	free(buf);
	free(t);
	MPI_Finalize();
	return 0;
}
