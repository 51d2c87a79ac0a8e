/* Non-blocking collectives: several in flight, completed in another
 * order than started, by wait and by test; a wait that times out. */
#define _POSIX_C_SOURCE 200809L
#include "ctest.h"
#include <time.h>

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* K allreduces of different lengths and reductions, a sparse allreduce
 * and a barrier in flight at once; waited in reverse order, or polled. */
static void test_inflight(int poll)
{
	enum { K = 4 };
	int base = 20000 + poll * 100;
	size_t n[K] = {1, 1000, 70000, 300001};
	sparcml_op op[K] = {SPARCML_SUM, SPARCML_AVG, SPARCML_MAX, SPARCML_SUM};
	float *buf[K];
	double *want[K];
	sparcml_request *req[K + 3];
	for (int k = 0; k < K; k++) {
		buf[k] = malloc(n[k] * sizeof(float));
		want[k] = malloc(n[k] * sizeof(double));
		double *in = malloc(n[k] * sizeof(double));
		fill_input(in, n[k], base + k, g_rank);
		store(buf[k], SPARCML_FLOAT32, in, n[k]);
		for (int r = 0; r < g_size; r++) {
			fill_input(in, n[k], base + k, r);
			for (size_t i = 0; i < n[k]; i++) {
				double a = r ? want[k][i] : in[i];
				if (r == 0)
					want[k][i] = in[i];
				else if (op[k] == SPARCML_MAX)
					want[k][i] = a > in[i] ? a : in[i];
				else
					want[k][i] = a + in[i];
			}
		}
		if (op[k] == SPARCML_AVG)
			for (size_t i = 0; i < n[k]; i++)
				want[k][i] = (float)want[k][i] / (float)g_size;
		free(in);
		CHECK_OK(sparcml_start_allreduce(g_comm, buf[k], n[k], SPARCML_FLOAT32, op[k], &req[k]));
	}
	/* A sparse allreduce: rank r brings indices r, r+size, ... below dim. */
	uint64_t dim = 5000;
	size_t nnz = 0;
	uint32_t *idx = malloc(dim * sizeof *idx);
	double *val = malloc(dim * sizeof *val), *dense = malloc(dim * sizeof *dense);
	for (uint64_t i = g_rank; i < dim; i += g_size + 1) {
		idx[nnz] = (uint32_t)i;
		val[nnz++] = (double)(i % 7) + 1;
	}
	sparcml_result *res;
	CHECK_OK(sparcml_result_create(&res));
	CHECK_OK(sparcml_start_sparse_allreduce(g_comm, dim, nnz, idx, val, SPARCML_FLOAT64, dense, &req[K]));
	CHECK_OK(sparcml_start_sparse_allreduce_result(g_comm, dim, nnz, idx, val, SPARCML_FLOAT64, res, &req[K + 1]));
	CHECK_OK(sparcml_start_barrier(g_comm, &req[K + 2]));

	for (int k = K + 2; k >= 0; k--) {
		if (!poll) {
			CHECK_OK(sparcml_wait(&req[k], -1));
		} else {
			int done = 0;
			while (!done) {
				CHECK_OK(sparcml_test(&req[k], &done));
				if (!done)
					sleep_ms(1);
			}
		}
		CHECK(req[k] == NULL, "request %d not released on completion", k);
	}
	for (int k = 0; k < K; k++) {
		for (size_t i = 0; i < n[k]; i++)
			if (buf[k][i] != (float)want[k][i]) {
				CHECK(0, "in-flight allreduce %d: element %zu is %g, want %g", k, i, buf[k][i], want[k][i]);
				break;
			}
		free(buf[k]), free(want[k]);
	}
	for (uint64_t i = 0; i < dim; i++) {
		double s = 0;
		for (int r = 0; r < g_size; r++)
			if (i >= (uint64_t)r && (i - r) % (g_size + 1) == 0)
				s += (double)(i % 7) + 1;
		if (dense[i] != s) {
			CHECK(0, "in-flight sparse allreduce: element %llu is %g, want %g", (unsigned long long)i, dense[i], s);
			break;
		}
		const double *rv = sparcml_result_values(res);
		double got = 0;
		if (sparcml_result_is_dense(res)) {
			got = rv[i];
		} else {
			const uint32_t *ri = sparcml_result_indices(res);
			for (size_t k = 0; k < sparcml_result_nnz(res); k++)
				if (ri[k] == i)
					got = rv[k];
		}
		if (got != s) {
			CHECK(0, "in-flight sparse result: element %llu is %g, want %g", (unsigned long long)i, got, s);
			break;
		}
	}
	sparcml_result_free(res);
	free(idx), free(val), free(dense);
}

/* A barrier cannot complete before rank 0 enters it: the other ranks'
 * short waits must report SPARCML_ERR_NOT_DONE and keep the request. */
static void test_wait_timeout(void)
{
	sparcml_request *req = NULL;
	if (g_rank == 0)
		sleep_ms(300);
	CHECK_OK(sparcml_start_barrier(g_comm, &req));
	if (g_rank != 0) {
		int rc = sparcml_wait(&req, 0.02);
		CHECK(rc == SPARCML_ERR_NOT_DONE && req != NULL, "short wait: %s, req %p",
		      sparcml_status_name(rc), (void *)req);
		CHECK(strstr(sparcml_last_error(), "barrier") != NULL, "not-done text: %s", sparcml_last_error());
		int done = 1;
		CHECK_OK(sparcml_test(&req, &done));
		CHECK(done == 0 && req != NULL, "test before rank 0 arrived: done %d", done);
		rc = sparcml_wait(&req, 0);
		CHECK(rc == SPARCML_ERR_NOT_DONE, "zero wait: %s", sparcml_status_name(rc));
	}
	CHECK_OK(sparcml_wait(&req, 30));
	CHECK(req == NULL, "request released");
}

void test_nonblocking(void)
{
	test_inflight(0);
	test_inflight(1);
	test_wait_timeout();
}
