/* Dense collectives: every dtype, reduction and a range of counts. */
#include "ctest.h"

static const size_t counts[] = {0, 1, 2, 7, 1000, 300001};
#define NCOUNTS (sizeof counts / sizeof counts[0])
static const sparcml_op ops[] = {SPARCML_SUM, SPARCML_AVG, SPARCML_MIN, SPARCML_MAX};
static const sparcml_dtype dtypes[] = {SPARCML_FLOAT32, SPARCML_FLOAT64};

static double reduce2(double a, double b, sparcml_op op)
{
	switch (op) {
	case SPARCML_MIN: return a < b ? a : b;
	case SPARCML_MAX: return a > b ? a : b;
	default: return a + b;
	}
}

/* expected[i] = op over every rank's input of test. AVG is the exact sum
 * divided by the number of ranks in the element type, as the library
 * computes it. */
static void expected_reduce(double *expected, size_t n, int test, sparcml_op op,
			    sparcml_dtype dtype)
{
	double *in = malloc((n ? n : 1) * sizeof *in);
	for (int r = 0; r < g_size; r++) {
		fill_input(in, n, test, r);
		for (size_t i = 0; i < n; i++)
			expected[i] = r == 0 ? in[i] : reduce2(expected[i], in[i], op);
	}
	if (op == SPARCML_AVG)
		for (size_t i = 0; i < n; i++)
			expected[i] = dtype == SPARCML_FLOAT64 ? expected[i] / g_size
							      : (double)((float)expected[i] / (float)g_size);
	free(in);
}

/* Compares n elements of got with expected exactly (the inputs are small
 * integers, so every sum is exact) and reports the first difference. */
static void check_equal(const void *got, sparcml_dtype dtype, const double *expected,
			size_t n, const char *what, int test)
{
	for (size_t i = 0; i < n; i++) {
		double g = load(got, dtype, i);
		if (g != expected[i]) {
			CHECK(0, "%s test %d (%s, n %zu): element %zu is %g, want %g",
			      what, test, dtype_name(dtype), n, i, g, expected[i]);
			return;
		}
	}
}

static void test_allreduce(int *test)
{
	for (size_t d = 0; d < 2; d++)
		for (size_t c = 0; c < NCOUNTS; c++)
			for (size_t o = 0; o < 4; o++) {
				int t = ++*test;
				size_t n = counts[c];
				double *in = malloc((n + 1) * sizeof *in), *want = malloc((n + 1) * sizeof *want);
				void *buf = malloc((n + 1) * 8);
				fill_input(in, n, t, g_rank);
				store(buf, dtypes[d], in, n);
				expected_reduce(want, n, t, ops[o], dtypes[d]);
				CHECK_OK(sparcml_allreduce(g_comm, buf, n, dtypes[d], ops[o]));
				check_equal(buf, dtypes[d], want, n, "allreduce", t);
				free(in), free(want), free(buf);
			}
}

/* Random floats (not exact sums): the result must equal the float64 sum
 * within rounding, and be bit-identical on every rank. */
static void test_allreduce_rounding(int *test)
{
	int t = ++*test;
	size_t n = 50000;
	float *buf = malloc(n * sizeof *buf);
	double *want = calloc(n, sizeof *want);
	for (int r = 0; r < g_size; r++) {
		uint64_t s = seed_of(t, r);
		for (size_t i = 0; i < n; i++) {
			float x = (float)((double)(mix64(&s) >> 11) / (double)(1ull << 53) * 2 - 1);
			want[i] += x;
			if (r == g_rank)
				buf[i] = x;
		}
	}
	CHECK_OK(sparcml_allreduce(g_comm, buf, n, SPARCML_FLOAT32, SPARCML_SUM));
	for (size_t i = 0; i < n; i++) {
		double err = buf[i] - want[i];
		if (err < 0)
			err = -err;
		if (err > 1e-6 * g_size) {
			CHECK(0, "allreduce of random floats: element %zu is %g, want %g", i, buf[i], want[i]);
			break;
		}
	}
	/* Every rank holds the same bits: rank 0's result broadcast must equal ours. */
	float *root = malloc(n * sizeof *root);
	memcpy(root, buf, n * sizeof *root);
	CHECK_OK(sparcml_broadcast(g_comm, root, n, SPARCML_FLOAT32, 0));
	CHECK(memcmp(root, buf, n * sizeof *root) == 0, "allreduce result differs between ranks");
	free(buf), free(want), free(root);
}

static void test_reduce_scatter(int *test)
{
	for (size_t d = 0; d < 2; d++)
		for (size_t c = 0; c < NCOUNTS; c++)
			for (int inplace = 0; inplace < 2; inplace++) {
				int t = ++*test;
				size_t m = counts[c] / g_size, n = m * g_size;
				sparcml_op op = inplace ? SPARCML_AVG : SPARCML_SUM;
				double *in = malloc((n + 1) * sizeof *in), *want = malloc((n + 1) * sizeof *want);
				void *send = malloc((n + 1) * 8), *recv = malloc((m + 1) * 8);
				fill_input(in, n, t, g_rank);
				store(send, dtypes[d], in, n);
				expected_reduce(want, n, t, op, dtypes[d]);
				void *out = inplace ? (char *)send + g_rank * m * dtype_size(dtypes[d]) : recv;
				CHECK_OK(sparcml_reduce_scatter(g_comm, send, out, m, dtypes[d], op));
				check_equal(out, dtypes[d], want + g_rank * m, m, "reduce-scatter", t);
				free(in), free(want), free(send), free(recv);
			}
}

static void test_allgather(int *test)
{
	for (size_t d = 0; d < 2; d++)
		for (size_t c = 0; c < NCOUNTS; c++) {
			int t = ++*test;
			size_t m = counts[c], n = m * g_size;
			double *want = malloc((n + 1) * sizeof *want);
			void *send = malloc((m + 1) * 8), *recv = malloc((n + 1) * 8);
			for (int r = 0; r < g_size; r++)
				fill_input(want + r * m, m, t, r);
			store(send, dtypes[d], want + g_rank * m, m);
			CHECK_OK(sparcml_allgather(g_comm, send, recv, m, dtypes[d]));
			check_equal(recv, dtypes[d], want, n, "allgather", t);
			free(want), free(send), free(recv);
		}
}

static void test_allgatherv(int *test)
{
	for (size_t d = 0; d < 2; d++)
		for (size_t c = 0; c < NCOUNTS; c++) {
			int t = ++*test;
			/* Rank r brings (r * base) % (base + 3) elements: some ranks none. */
			size_t base = counts[c], total = 0;
			size_t *rc = malloc(g_size * sizeof *rc);
			for (int r = 0; r < g_size; r++)
				total += rc[r] = base ? (size_t)(r * base) % (base + 3) : 0;
			double *want = malloc((total + 1) * sizeof *want);
			size_t off = 0, mine = 0;
			for (int r = 0; r < g_size; r++) {
				fill_input(want + off, rc[r], t, r);
				if (r == g_rank)
					mine = off;
				off += rc[r];
			}
			void *send = malloc((rc[g_rank] + 1) * 8), *recv = malloc((total + 1) * 8);
			store(send, dtypes[d], want + mine, rc[g_rank]);
			CHECK_OK(sparcml_allgatherv(g_comm, send, rc[g_rank], recv, rc, dtypes[d]));
			check_equal(recv, dtypes[d], want, total, "allgatherv", t);
			free(rc), free(want), free(send), free(recv);
		}
}

static void test_broadcast(int *test)
{
	for (size_t d = 0; d < 2; d++)
		for (size_t c = 0; c < NCOUNTS; c++)
			for (int root = 0; root < g_size; root++) {
				int t = ++*test;
				size_t n = counts[c];
				double *want = malloc((n + 1) * sizeof *want);
				void *buf = malloc((n + 1) * 8);
				fill_input(want, n, t, root);
				if (g_rank == root)
					store(buf, dtypes[d], want, n);
				else
					memset(buf, 0xff, n * 8); /* NaNs: must all be overwritten */
				CHECK_OK(sparcml_broadcast(g_comm, buf, n, dtypes[d], root));
				check_equal(buf, dtypes[d], want, n, "broadcast", t);
				free(want), free(buf);
			}
}

void test_dense(void)
{
	int test = 0;
	test_allreduce(&test);
	test_allreduce_rounding(&test);
	test_reduce_scatter(&test);
	test_allgather(&test);
	test_allgatherv(&test);
	test_broadcast(&test);
	CHECK_OK(sparcml_barrier(g_comm));
}
