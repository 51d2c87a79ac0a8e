#define _POSIX_C_SOURCE 200809L
/* Bad input: one rank's bad call (or ranks that disagree) must fail on
 * every rank with an error code, never crash or hang, and leave the
 * communicator usable. */
#include "ctest.h"
#include <time.h>

int bad_rank(int c)
{
	return 1 + c % (g_size - 1);
}

/* After a failed case, the communicator must still reduce correctly. */
void check_still_usable(const char *after)
{
	double x[3] = {g_rank, 1, -2};
	int rc = sparcml_allreduce(g_comm, x, 3, SPARCML_FLOAT64, SPARCML_SUM);
	double ranks = (double)g_size * (g_size - 1) / 2;
	CHECK(rc == SPARCML_OK && x[0] == ranks && x[1] == g_size && x[2] == -2.0 * g_size,
	      "allreduce after %s: %s (%s), got %g %g %g", after, sparcml_status_name(rc),
	      sparcml_last_error(), x[0], x[1], x[2]);
}

/* Checks the outcome of one case on this rank: the bad rank must get
 * want_bad, the others one of the codes a peer's failure gives, naming the
 * operation; a failure another rank reported names that rank. */
void check_failed(const char *name, int rc, int bad, int want_bad, const char *op)
{
	sparcml_error_info info;
	sparcml_last_error_info(&info);
	if (g_rank == bad || bad < 0) {
		CHECK(rc == want_bad, "%s: the bad rank got %s, want %s (%s)", name,
		      sparcml_status_name(rc), sparcml_status_name(want_bad), sparcml_last_error());
	} else {
		CHECK(rc == SPARCML_ERR_ABORTED || rc == SPARCML_ERR_MISMATCH || rc == SPARCML_ERR_INVALID,
		      "%s: a good rank got %s (%s)", name, sparcml_status_name(rc), sparcml_last_error());
		/* The peer field is the rank this one heard from, which may
		 * have relayed the failure; the text names where it began. */
		char origin[32];
		snprintf(origin, sizeof origin, "rank %d", bad);
		CHECK(info.peer >= 0 && info.peer < g_size && info.peer != g_rank && strstr(info.message, origin),
		      "%s: failure names peer %d and not %s: %s", name, info.peer, origin, info.message);
	}
	if (rc != SPARCML_OK) {
		CHECK(info.code == rc && info.rank == g_rank && info.seq > 0 && strcmp(info.op, op) == 0,
		      "%s: error info code %d rank %d seq %llu op %s, want code %d rank %d op %s",
		      name, info.code, info.rank, (unsigned long long)info.seq, info.op, rc, g_rank, op);
		char want[64];
		snprintf(want, sizeof want, "rank %d", g_rank);
		CHECK(strstr(info.message, want) && strstr(info.message, op), "%s: error text: %s", name, info.message);
	}
	check_still_usable(name);
}

static void dense_cases(int *c)
{
	float x[64] = {0};
	int b, rc;

	b = bad_rank(++*c);
	rc = sparcml_allreduce(g_comm, g_rank == b ? NULL : x, 64, SPARCML_FLOAT32, SPARCML_SUM);
	check_failed("NULL buffer", rc, b, SPARCML_ERR_INVALID, "allreduce");

	b = bad_rank(++*c);
	rc = sparcml_allreduce(g_comm, x, 64, g_rank == b ? (sparcml_dtype)7 : SPARCML_FLOAT32, SPARCML_SUM);
	check_failed("unknown dtype", rc, b, SPARCML_ERR_INVALID, "allreduce");

	b = bad_rank(++*c);
	rc = sparcml_allreduce(g_comm, x, 64, SPARCML_FLOAT32, g_rank == b ? (sparcml_op)9 : SPARCML_SUM);
	check_failed("unknown op", rc, b, SPARCML_ERR_INVALID, "allreduce");

	b = bad_rank(++*c);
	rc = sparcml_allreduce(g_comm, x, g_rank == b ? 63 : 64, SPARCML_FLOAT32, SPARCML_SUM);
	check_failed("mismatched count", rc, b, SPARCML_ERR_MISMATCH, "allreduce");

	b = bad_rank(++*c);
	rc = sparcml_allreduce(g_comm, x, g_rank == b ? 32 : 64, g_rank == b ? SPARCML_FLOAT64 : SPARCML_FLOAT32,
			       SPARCML_SUM);
	check_failed("mismatched dtype", rc, b, SPARCML_ERR_MISMATCH, "allreduce");

	b = bad_rank(++*c);
	rc = sparcml_allreduce(g_comm, x, 64, SPARCML_FLOAT32, g_rank == b ? SPARCML_MAX : SPARCML_SUM);
	check_failed("mismatched op", rc, b, SPARCML_ERR_MISMATCH, "allreduce");

	b = bad_rank(++*c);
	if (g_rank == b)
		rc = sparcml_broadcast(g_comm, x, 64, SPARCML_FLOAT32, 0);
	else
		rc = sparcml_allreduce(g_comm, x, 64, SPARCML_FLOAT32, SPARCML_SUM);
	check_failed("different collectives", rc, b, SPARCML_ERR_MISMATCH, g_rank == b ? "broadcast" : "allreduce");

	rc = sparcml_broadcast(g_comm, x, 64, SPARCML_FLOAT32, g_size);
	check_failed("root out of range on every rank", rc, -1, SPARCML_ERR_INVALID, "broadcast");

	b = bad_rank(++*c);
	float *big = calloc(g_size * 64, sizeof *big);
	rc = sparcml_reduce_scatter(g_comm, g_rank == b ? NULL : big, x, 64, SPARCML_FLOAT32, SPARCML_SUM);
	check_failed("NULL reduce-scatter input", rc, b, SPARCML_ERR_INVALID, "reduce-scatter");
	free(big);

	b = bad_rank(++*c);
	size_t *counts = malloc(g_size * sizeof *counts);
	for (int r = 0; r < g_size; r++)
		counts[r] = 1 + (g_rank == b && r == 0);
	float *out = calloc(g_size * 2, sizeof *out);
	rc = sparcml_allgatherv(g_comm, x, 1, out, counts, SPARCML_FLOAT32);
	check_failed("allgatherv counts that differ across ranks", rc, b, SPARCML_ERR_MISMATCH, "allgatherv");

	b = bad_rank(++*c);
	for (int r = 0; r < g_size; r++)
		counts[r] = 1;
	rc = sparcml_allgatherv(g_comm, x, 1, out, g_rank == b ? NULL : counts, SPARCML_FLOAT32);
	check_failed("NULL recvcounts", rc, b, SPARCML_ERR_INVALID, "allgatherv");

	b = bad_rank(++*c);
	rc = sparcml_allgather(g_comm, x, g_rank == b ? NULL : out, 2, SPARCML_FLOAT32);
	check_failed("NULL allgather output", rc, b, SPARCML_ERR_INVALID, "allgather");
	free(counts), free(out);

	b = bad_rank(++*c);
	rc = g_rank == b ? sparcml_fail(g_comm, "allreduce", "the application's own check failed")
			 : sparcml_allreduce(g_comm, x, 64, SPARCML_FLOAT32, SPARCML_SUM);
	check_failed("sparcml_fail", rc, b, SPARCML_ERR_INVALID, "allreduce");
	if (g_rank != b)
		CHECK(strstr(sparcml_last_error(), "the application's own check failed") != NULL,
		      "the reason reaches the other ranks: %s", sparcml_last_error());
}

static void sparse_cases(int *c)
{
	uint32_t idx[4] = {1, 5, 9, 20};
	uint32_t unsorted[4] = {5, 1, 9, 20};
	uint32_t outside[4] = {1, 5, 9, 200};
	float val[4] = {1, 2, 3, 4};
	float dense[100];
	int b, rc;

	b = bad_rank(++*c);
	rc = sparcml_sparse_allreduce(g_comm, 100, 4, g_rank == b ? unsorted : idx, val, SPARCML_FLOAT32, dense);
	check_failed("unsorted indices", rc, b, SPARCML_ERR_INVALID, "sparse-allreduce");

	b = bad_rank(++*c);
	rc = sparcml_sparse_allreduce(g_comm, 100, 4, g_rank == b ? outside : idx, val, SPARCML_FLOAT32, dense);
	check_failed("index outside the dimension", rc, b, SPARCML_ERR_INVALID, "sparse-allreduce");

	b = bad_rank(++*c);
	rc = sparcml_sparse_allreduce(g_comm, g_rank == b ? 50 : 100, 4, idx, val, SPARCML_FLOAT32, dense);
	check_failed("mismatched dimension", rc, b, SPARCML_ERR_MISMATCH, "sparse-allreduce");

	b = bad_rank(++*c);
	rc = sparcml_sparse_allreduce(g_comm, 100, 4, g_rank == b ? NULL : idx, val, SPARCML_FLOAT32, dense);
	check_failed("NULL indices", rc, b, SPARCML_ERR_INVALID, "sparse-allreduce");

	b = bad_rank(++*c);
	rc = sparcml_sparse_allreduce(g_comm, 100, 4, idx, val, SPARCML_FLOAT32, g_rank == b ? NULL : dense);
	check_failed("NULL dense output", rc, b, SPARCML_ERR_INVALID, "sparse-allreduce");

	b = bad_rank(++*c);
	rc = sparcml_sparse_allreduce_result(g_comm, 100, 4, idx, val, SPARCML_FLOAT32, NULL);
	check_failed("NULL result on every rank", rc, -1, SPARCML_ERR_INVALID, "sparse-allreduce");

	/* A result in use by a pending request cannot be used again. */
	sparcml_result *res;
	sparcml_request *req;
	CHECK_OK(sparcml_result_create(&res));
	CHECK_OK(sparcml_start_sparse_allreduce_result(g_comm, 100, 4, idx, val, SPARCML_FLOAT32, res, &req));
	rc = sparcml_sparse_allreduce_result(g_comm, 100, 4, idx, val, SPARCML_FLOAT32, res);
	CHECK(rc == SPARCML_ERR_INVALID, "busy result: %s", sparcml_status_name(rc));
	CHECK_OK(sparcml_wait(&req, -1));
	/* Sparse or dense, as the library chose: index 20 holds 4 per rank. */
	const float *rv = sparcml_result_values(res);
	int dense_form = sparcml_result_is_dense(res);
	size_t nnz = sparcml_result_nnz(res);
	CHECK(rv && nnz == (dense_form ? 100u : 4u) && rv[dense_form ? 20 : 3] == 4.0f * g_size,
	      "busy result's own call: nnz %zu dense %d", nnz, dense_form);
	sparcml_result_free(res);
	check_still_usable("busy result");
}

static void request_cases(int *c)
{
	float x[64] = {0};
	sparcml_request *req = (sparcml_request *)0x1;
	int b = bad_rank(++*c), rc, done;
	rc = sparcml_start_allreduce(g_comm, g_rank == b ? NULL : x, 64, SPARCML_FLOAT32, SPARCML_SUM, &req);
	if (g_rank == b) {
		CHECK(rc == SPARCML_ERR_INVALID && req == NULL, "start with NULL buffer: %s, req %p",
		      sparcml_status_name(rc), (void *)req);
	} else {
		CHECK_OK(rc);
		rc = sparcml_wait(&req, 60);
	}
	check_failed("start with NULL buffer", rc, b, SPARCML_ERR_INVALID, "allreduce");

	CHECK(sparcml_wait(NULL, 1) == SPARCML_ERR_INVALID, "wait(NULL)");
	req = NULL;
	CHECK(sparcml_wait(&req, 1) == SPARCML_ERR_INVALID, "wait(&NULL)");
	CHECK(sparcml_test(&req, &done) == SPARCML_ERR_INVALID, "test(&NULL)");
	rc = sparcml_start_barrier(g_comm, NULL);
	check_failed("start without a request pointer on every rank", rc, -1, SPARCML_ERR_INVALID, "barrier");
	CHECK(sparcml_allreduce(NULL, x, 1, SPARCML_FLOAT32, SPARCML_SUM) == SPARCML_ERR_INVALID, "NULL comm");
	CHECK(strstr(sparcml_last_error(), "NULL") != NULL, "NULL comm text: %s", sparcml_last_error());
	check_still_usable("request cases");
}

void test_errors(void)
{
	int c = 0;
	dense_cases(&c);
	sparse_cases(&c);
	request_cases(&c);
}

/* The last test, once the others are agreed on: the last rank aborts, and
 * every other rank's next operation must fail naming it, not hang. */
void test_abort(void)
{
	int b = g_size - 1, rc;
	float x[16] = {0};
	if (g_rank == b) {
		/* Abort resets the connections, so data this rank already sent
		 * but a peer has not read yet can be lost with them: give the
		 * others time to finish reading the previous operation, which
		 * this rank may have completed before them. */
		struct timespec ts = {2, 0};
		nanosleep(&ts, NULL);
		CHECK_OK(sparcml_abort(g_comm, "the test aborts this rank"));
		rc = sparcml_allreduce(g_comm, x, 16, SPARCML_FLOAT32, SPARCML_SUM);
		CHECK(rc == SPARCML_ERR_ABORTED, "allreduce after abort: %s (%s)", sparcml_status_name(rc),
		      sparcml_last_error());
		return;
	}
	rc = sparcml_allreduce(g_comm, x, 16, SPARCML_FLOAT32, SPARCML_SUM);
	sparcml_error_info info;
	sparcml_last_error_info(&info);
	CHECK(rc == SPARCML_ERR_PEER_LOST || rc == SPARCML_ERR_ABORTED, "allreduce with an aborted peer: %s (%s)",
	      sparcml_status_name(rc), sparcml_last_error());
	char origin[32];
	snprintf(origin, sizeof origin, "rank %d", b);
	CHECK(strstr(info.message, origin) != NULL, "the failure names %s: %s", origin, info.message);
}
