/* ABI 0.4: point-to-point messages, sub-communicators (comm_split) and
 * deadlines (set_timeout), each result checked against every rank's seeded
 * input. */
#define _POSIX_C_SOURCE 200809L
#include "ctest.h"
#include <time.h>

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* A ring: each rank sends two messages of its input to the next rank
 * (float64, then float32) and receives the previous rank's; the two
 * match in the order they were started. */
static void test_ring(void)
{
	enum { N = 1000 };
	int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
	double in[N], want[N], got64[N];
	float in32[N], got32[N];
	fill_input(in, N, 30000, g_rank);
	store(in32, SPARCML_FLOAT32, in, N);
	fill_input(want, N, 30000, prev);
	sparcml_request *req[4] = {NULL, NULL, NULL, NULL};
	CHECK_OK(sparcml_start_recv(g_comm, got64, N, SPARCML_FLOAT64, prev, &req[0]));
	CHECK_OK(sparcml_start_recv(g_comm, got32, N, SPARCML_FLOAT32, prev, &req[1]));
	CHECK_OK(sparcml_start_send(g_comm, in, N, SPARCML_FLOAT64, next, &req[2]));
	CHECK_OK(sparcml_start_send(g_comm, in32, N, SPARCML_FLOAT32, next, &req[3]));
	for (int k = 3; k >= 0; k--)
		CHECK_OK(sparcml_wait(&req[k], -1));
	for (size_t i = 0; i < N; i++)
		if (got64[i] != want[i] || got32[i] != (float)want[i]) {
			CHECK(0, "ring from rank %d: [%zu] = %g / %g, want %g", prev, i, got64[i], got32[i], want[i]);
			break;
		}
}

/* A peer that is not another rank fails on this rank only, with no
 * request. */
static void test_bad_peer(void)
{
	double x[4] = {0};
	sparcml_request *req = (sparcml_request *)0x1;
	int rc = sparcml_start_send(g_comm, x, 4, SPARCML_FLOAT64, g_rank, &req);
	CHECK(rc == SPARCML_ERR_INVALID && req == NULL, "send to self: %s, req %p", sparcml_status_name(rc),
	      (void *)req);
	req = (sparcml_request *)0x1;
	rc = sparcml_start_recv(g_comm, x, 4, SPARCML_FLOAT64, g_size, &req);
	CHECK(rc == SPARCML_ERR_INVALID && req == NULL, "recv from rank %d of %d: %s", g_size, g_size,
	      sparcml_status_name(rc));
	check_still_usable("bad peers");
}

/* color = rank % 2, key = -rank: each part ranks its members in reverse;
 * an allreduce on it sums exactly its members' inputs. A rank passing a
 * negative color gets no communicator. */
static void test_split(void)
{
	sparcml_comm *sub = (sparcml_comm *)0x1;
	CHECK_OK(sparcml_comm_split(g_comm, g_rank % 2, -g_rank, &sub));
	if (sub == NULL || sub == (sparcml_comm *)0x1) {
		CHECK(0, "split returned no communicator");
		return;
	}
	int members[64], m = 0;
	for (int r = g_size - 1; r >= 0; r--)
		if (r % 2 == g_rank % 2 && m < 64)
			members[m++] = r;
	int want_rank = -1;
	for (int i = 0; i < m; i++)
		if (members[i] == g_rank)
			want_rank = i;
	CHECK(sparcml_size(sub) == m && sparcml_rank(sub) == want_rank, "split: rank %d of %d, want %d of %d",
	      sparcml_rank(sub), sparcml_size(sub), want_rank, m);
	enum { N = 777 };
	double buf[N], in[N], want[N] = {0};
	fill_input(buf, N, 31000, g_rank);
	for (int i = 0; i < m; i++) {
		fill_input(in, N, 31000, members[i]);
		for (size_t j = 0; j < N; j++)
			want[j] += in[j];
	}
	CHECK_OK(sparcml_allreduce(sub, buf, N, SPARCML_FLOAT64, SPARCML_SUM));
	for (size_t j = 0; j < N; j++)
		if (buf[j] != want[j]) {
			CHECK(0, "allreduce on the split: [%zu] = %g, want %g", j, buf[j], want[j]);
			break;
		}
	CHECK_OK(sparcml_finalize(sub));

	sparcml_comm *none = (sparcml_comm *)0x1;
	CHECK_OK(sparcml_comm_split(g_comm, g_rank == 1 ? -1 : 0, 0, &none));
	if (g_rank == 1)
		CHECK(none == NULL, "negative color: communicator %p, want NULL", (void *)none);
	else if (none != NULL && none != (sparcml_comm *)0x1)
		CHECK_OK(sparcml_finalize(none));
	check_still_usable("split");
}

/* A deadline set on a split of every rank: rank 0 enters a barrier 1.5 s
 * late, the others' barrier (deadline 0.3 s) fails with a timeout, and so
 * does rank 0's, which no one else joins any more. The parent stays
 * usable. */
static void test_set_timeout(void)
{
	sparcml_comm *sub = NULL;
	CHECK_OK(sparcml_comm_split(g_comm, 0, g_rank, &sub));
	if (sub == NULL)
		return;
	CHECK_OK(sparcml_set_timeout(sub, 0.3));
	if (g_rank == 0)
		sleep_ms(1500);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = sparcml_barrier(sub);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	CHECK(rc == SPARCML_ERR_TIMEOUT || (g_rank == 0 && rc == SPARCML_ERR_ABORTED),
	      "barrier past a 0.3 s deadline: %s: %s", sparcml_status_name(rc), sparcml_last_error());
	if (g_rank != 0)
		CHECK(took >= 0.25 && took < 1.4, "the barrier failed after %.3f s, want about the 0.3 s deadline", took);
	CHECK(sparcml_set_timeout(NULL, 1) == SPARCML_ERR_INVALID, "set_timeout(NULL)");
	sparcml_finalize(sub); /* after a failed operation it may report it, but must return */
	check_still_usable("a split's timeout");
}

void test_p2p(void)
{
	test_ring();
	test_bad_peer();
	test_split();
	test_set_timeout();
}
