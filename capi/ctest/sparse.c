/* Sparse allreduce: dense output and sparse results, against the dense
 * sum and the union of indices computed here from every rank's input. */
#include "ctest.h"

/* Rank r's sparse input of a test: each index of [0, dim) is present with
 * probability density (none at all on rank `empty`), with a nonzero small
 * integer value. Returns nnz; *idx and *val are malloc'ed. */
static size_t sparse_input(int test, int rank, uint64_t dim, double density, int empty,
			   uint32_t **idx, double **val)
{
	uint64_t s = seed_of(test, rank);
	size_t nnz = 0, cap = 16;
	*idx = malloc(cap * sizeof **idx);
	*val = malloc(cap * sizeof **val);
	for (uint64_t i = 0; i < dim && rank != empty; i++) {
		if ((double)(mix64(&s) >> 11) / (double)(1ull << 53) >= density)
			continue;
		if (nnz == cap) {
			cap *= 2;
			*idx = realloc(*idx, cap * sizeof **idx);
			*val = realloc(*val, cap * sizeof **val);
		}
		double v = small_int(&s);
		(*idx)[nnz] = (uint32_t)i;
		(*val)[nnz++] = v != 0 ? v : 1;
	}
	return nnz;
}

/* The expected sum, dense, and which indices any rank brought. */
static void sparse_expected(int test, uint64_t dim, double density, int empty,
			    double *sum, char *present)
{
	memset(sum, 0, dim * sizeof *sum);
	memset(present, 0, dim);
	for (int r = 0; r < g_size; r++) {
		uint32_t *idx;
		double *val;
		size_t nnz = sparse_input(test, r, dim, density, empty, &idx, &val);
		for (size_t k = 0; k < nnz; k++) {
			sum[idx[k]] += val[k];
			present[idx[k]] = 1;
		}
		free(idx), free(val);
	}
}

static void check_result(const sparcml_result *res, sparcml_dtype dtype, uint64_t dim,
			 const double *sum, const char *present, int test)
{
	CHECK(sparcml_result_dim(res) == dim, "test %d: result dim %llu, want %llu", test,
	      (unsigned long long)sparcml_result_dim(res), (unsigned long long)dim);
	CHECK(sparcml_result_dtype(res) == dtype, "test %d: result dtype", test);
	size_t nnz = sparcml_result_nnz(res);
	const void *vals = sparcml_result_values(res);
	if (sparcml_result_is_dense(res)) {
		CHECK(nnz == dim && sparcml_result_indices(res) == NULL, "test %d: dense result nnz %zu", test, nnz);
		for (uint64_t i = 0; i < dim && nnz == dim; i++)
			if (load(vals, dtype, i) != sum[i]) {
				CHECK(0, "test %d: dense result[%llu] = %g, want %g", test,
				      (unsigned long long)i, load(vals, dtype, i), sum[i]);
				break;
			}
		return;
	}
	const uint32_t *idx = sparcml_result_indices(res);
	size_t want = 0;
	for (uint64_t i = 0; i < dim; i++)
		want += present[i];
	CHECK(nnz == want, "test %d: sparse result has %zu entries, want the union's %zu", test, nnz, want);
	CHECK(nnz == 0 || (idx != NULL && vals != NULL), "test %d: NULL arrays for %zu entries", test, nnz);
	for (size_t k = 0; k < nnz && nnz == want; k++) {
		if (idx[k] >= dim || !present[idx[k]] || (k > 0 && idx[k] <= idx[k - 1]) ||
		    load(vals, dtype, k) != sum[idx[k]]) {
			CHECK(0, "test %d: entry %zu: index %u value %g (want sorted union indices, sum %g)",
			      test, k, idx[k], load(vals, dtype, k), idx[k] < dim ? sum[idx[k]] : 0.0);
			break;
		}
	}
}

void test_sparse(void)
{
	static const uint64_t dims[] = {1, 100, 10000, 200000};
	static const double densities[] = {0, 0.001, 0.05, 0.6};
	int test = 10000;
	sparcml_result *res = NULL;
	CHECK_OK(sparcml_result_create(&res));
	for (int d = 0; d < 2; d++) {
		sparcml_dtype dtype = d ? SPARCML_FLOAT64 : SPARCML_FLOAT32;
		for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
			for (size_t pi = 0; pi < sizeof densities / sizeof densities[0]; pi++)
				for (int empty = -1; empty < 1; empty++) {
					int t = ++test;
					uint64_t dim = dims[di];
					uint32_t *idx;
					double *val;
					size_t nnz = sparse_input(t, g_rank, dim, densities[pi], empty, &idx, &val);
					void *values = malloc((nnz + 1) * 8), *dense = malloc(dim * 8);
					store(values, dtype, val, nnz);
					double *sum = malloc(dim * sizeof *sum);
					char *present = malloc(dim);
					sparse_expected(t, dim, densities[pi], empty, sum, present);

					CHECK_OK(sparcml_sparse_allreduce(g_comm, dim, nnz, nnz ? idx : NULL,
									  nnz ? values : NULL, dtype, dense));
					for (uint64_t i = 0; i < dim; i++)
						if (load(dense, dtype, i) != sum[i]) {
							CHECK(0, "sparse test %d (dim %llu density %g %s): dense[%llu] = %g, want %g",
							      t, (unsigned long long)dim, densities[pi], dtype_name(dtype),
							      (unsigned long long)i, load(dense, dtype, i), sum[i]);
							break;
						}
					/* The same input into a reused result handle. */
					CHECK_OK(sparcml_sparse_allreduce_result(g_comm, dim, nnz, idx, values, dtype, res));
					check_result(res, dtype, dim, sum, present, t);
					free(idx), free(val), free(values), free(dense), free(sum), free(present);
				}
	}
	sparcml_result_free(res);
	sparcml_result_free(NULL);
	CHECK(sparcml_result_nnz(NULL) == 0 && sparcml_result_values(NULL) == NULL &&
	      sparcml_result_indices(NULL) == NULL && sparcml_result_dim(NULL) == 0 &&
	      sparcml_result_is_dense(NULL) == 0, "result accessors of NULL");
}

/* Row-sparse allreduce: rank r's rows are sparse_input's indices, row i's
 * value j the entry's value times j+1; the result is rows, every stored
 * one touched and equal to the sum, every row with a nonzero sum there. */
void test_sparse_rows(void)
{
	static const uint64_t dims[] = {1, 100, 5000};
	static const double densities[] = {0, 0.01, 0.7};
	enum { W = 8 };
	int test = 20000;
	sparcml_result *res = NULL;
	CHECK_OK(sparcml_result_create(&res));
	for (int d = 0; d < 2; d++) {
		sparcml_dtype dtype = d ? SPARCML_FLOAT64 : SPARCML_FLOAT32;
		for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
			for (size_t pi = 0; pi < sizeof densities / sizeof densities[0]; pi++)
				for (int empty = -1; empty < 1; empty++) {
					int t = ++test;
					uint64_t rows = dims[di];
					uint32_t *idx;
					double *val;
					size_t n = sparse_input(t, g_rank, rows, densities[pi], empty, &idx, &val);
					double *rowvals = malloc((n * W + 1) * sizeof *rowvals);
					for (size_t k = 0; k < n; k++)
						for (int j = 0; j < W; j++)
							rowvals[k * W + j] = val[k] * (j + 1);
					void *values = malloc((n * W + 1) * 8);
					store(values, dtype, rowvals, n * W);
					double *sum = malloc(rows * sizeof *sum);
					char *present = malloc(rows);
					sparse_expected(t, rows, densities[pi], empty, sum, present);
					CHECK_OK(sparcml_sparse_allreduce_rows(g_comm, rows, W, n, n ? idx : NULL,
									       n ? values : NULL, dtype, res));
					CHECK(!sparcml_result_is_dense(res) && sparcml_result_width(res) == W &&
					      sparcml_result_dim(res) == rows,
					      "rows test %d: dense %d width %zu dim %llu", t, sparcml_result_is_dense(res),
					      sparcml_result_width(res), (unsigned long long)sparcml_result_dim(res));
					size_t got = sparcml_result_nnz(res), nonzero = 0;
					const uint32_t *ri = sparcml_result_indices(res);
					const void *rv = sparcml_result_values(res);
					for (uint64_t i = 0; i < rows; i++)
						nonzero += sum[i] != 0;
					size_t stored_nonzero = 0;
					for (size_t k = 0; k < got; k++) {
						uint32_t i = ri[k];
						CHECK(i < rows && present[i] && (k == 0 || ri[k - 1] < i),
						      "rows test %d: stored row %u untouched or out of order", t, i);
						if (i >= rows)
							break;
						stored_nonzero += sum[i] != 0;
						for (int j = 0; j < W; j++)
							if (load(rv, dtype, k * W + j) != sum[i] * (j + 1)) {
								CHECK(0, "rows test %d: row %u value %d = %g, want %g", t, i, j,
								      load(rv, dtype, k * W + j), sum[i] * (j + 1));
								break;
							}
					}
					CHECK(stored_nonzero == nonzero, "rows test %d: %zu of %zu nonzero rows stored", t,
					      stored_nonzero, nonzero);
					free(idx), free(val), free(rowvals), free(values), free(sum), free(present);
				}
	}
	CHECK(sparcml_result_width(NULL) == 1, "width of NULL");
	CHECK(sparcml_sparse_allreduce_rows(g_comm, 10, 4, 1, NULL, NULL, SPARCML_FLOAT32, res) == SPARCML_ERR_INVALID,
	      "NULL rows accepted");
	sparcml_result_free(res);
}
