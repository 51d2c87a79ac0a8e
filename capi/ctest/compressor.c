/* The gradient compressor: every rank replays every rank's top-k with error
 * feedback here (the accumulation, the selection by magnitude with ties to
 * the lower index, the residual) and checks the library's average and its
 * own residual against it; with density 1 the average must equal the dense
 * allreduce's; the other selection methods are checked by conservation
 * (what the ranks sent plus what they kept is what they were given). */
#include <math.h>
#include "ctest.h"

#define MAXR 16 /* ranks the reference replays */

/* Rank r's gradient at step t: multiples of 1/256 in [-8, 8], so every sum
 * the test makes is exact in float32 whatever the order. */
static double grad_value(int test, int rank, int step, size_t i, size_t n)
{
	uint64_t s = seed_of(test * 16 + step, rank) ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull) ^ n;
	return (double)((int)(mix64(&s) % 4097) - 2048) / 256.0;
}

static void grad_of(void *buf, sparcml_dtype dtype, int test, int rank, int step, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		double v = grad_value(test, rank, step, i, n);
		if (dtype == SPARCML_FLOAT64)
			((double *)buf)[i] = v;
		else
			((float *)buf)[i] = (float)v;
	}
}

/* compress.SelectCount: ceil(density * n), guarded against the rounding
 * of the product. */
static size_t select_count(size_t n, double density)
{
	double x = density * (double)n;
	size_t k = (size_t)ceil(x - 1e-9 * (x > 1 ? x : 1));
	return k < n ? k : n;
}

static const double *g_order_key;

/* Larger magnitude first, then the lower index. */
static int by_magnitude(const void *a, const void *b)
{
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	double x = fabs(g_order_key[i]), y = fabs(g_order_key[j]);
	if (x != y)
		return x > y ? -1 : 1;
	return i < j ? -1 : 1;
}

/* One rank's compressor state in the reference: values kept as doubles
 * holding exact float32 (or float64) sums. */
struct ref {
	size_t n, k;
	int ef;
	sparcml_dtype dtype;
	double *residual[MAXR];
	double *sent[MAXR];
	double *acc;
	size_t *order;
};

static void ref_init(struct ref *r, size_t n, double density, int ef, sparcml_dtype dtype)
{
	r->n = n, r->k = select_count(n, density), r->ef = ef, r->dtype = dtype;
	for (int q = 0; q < g_size; q++) {
		r->residual[q] = calloc(n, sizeof(double));
		r->sent[q] = calloc(n, sizeof(double));
	}
	r->acc = malloc(n * sizeof(double));
	r->order = malloc(n * sizeof(size_t));
}

static void ref_free(struct ref *r)
{
	for (int q = 0; q < g_size; q++)
		free(r->residual[q]), free(r->sent[q]);
	free(r->acc), free(r->order);
}

static double round_to(sparcml_dtype dtype, double v)
{
	return dtype == SPARCML_FLOAT64 ? v : (double)(float)v;
}

/* Replays step `step` on every rank and leaves the average in avg. */
static void ref_step(struct ref *r, int test, int step, double *avg)
{
	memset(avg, 0, r->n * sizeof *avg);
	for (int q = 0; q < g_size; q++) {
		for (size_t i = 0; i < r->n; i++) {
			double g = grad_value(test, q, step, i, r->n);
			r->acc[i] = r->ef ? round_to(r->dtype, r->residual[q][i] + g) : g;
			r->order[i] = i;
			r->sent[q][i] = 0;
		}
		g_order_key = r->acc;
		qsort(r->order, r->n, sizeof *r->order, by_magnitude);
		for (size_t j = 0; j < r->k; j++) {
			size_t i = r->order[j];
			r->sent[q][i] = r->acc[i];
			r->acc[i] = 0;
		}
		for (size_t i = 0; i < r->n; i++) {
			if (r->ef)
				r->residual[q][i] = r->acc[i];
			avg[i] += r->sent[q][i];
		}
	}
	for (size_t i = 0; i < r->n; i++)
		avg[i] /= g_size;
}

static int close_to(double got, double want, double tol)
{
	return fabs(got - want) <= tol * fabs(want) + 1e-12;
}

/* Runs steps of the compressor against the reference; a quantized
 * average is checked against a bound instead of exactly. With started,
 * each step is sparcml_compressor_start, a dense allreduce started and
 * completed while it is in flight, then sparcml_wait. */
static void run_steps(const char *name, int test, size_t n, sparcml_dtype dtype, double density, int ef,
		      sparcml_quant quant, int steps, int started)
{
	sparcml_compressor *comp = NULL;
	CHECK_OK(sparcml_compressor_create(g_comm, n, dtype, density, quant, ef, SPARCML_SELECT_EXACT, &comp));
	if (!comp)
		return;
	struct ref r;
	ref_init(&r, n, density, ef, dtype);
	void *buf = malloc(n * 8), *res = malloc(n * 8);
	double *avg = malloc(n * sizeof *avg);
	for (int t = 0; t < steps; t++) {
		grad_of(buf, dtype, test, g_rank, t, n);
		if (started) {
			sparcml_request *req = NULL;
			CHECK_OK(sparcml_compressor_start(comp, buf, n, &req));
			check_still_usable("a compressor's start");
			CHECK_OK(sparcml_wait(&req, -1));
			CHECK(req == NULL, "%s step %d: request not released", name, t);
		} else {
			CHECK_OK(sparcml_compressor_reduce(comp, buf, n));
		}
		ref_step(&r, test, t, avg);
		/* Quantized values: each encoding on the way (at most one per
		 * rank) errs by at most one step of its scale, which is at most
		 * the sum of the ranks' largest magnitudes sent. */
		double scale = 0;
		for (int q = 0; q < g_size; q++) {
			double m = 0;
			for (size_t i = 0; i < n; i++)
				m = fmax(m, fabs(r.sent[q][i]));
			scale += m;
		}
		static const double levels[] = {0, 2048, 256, 127, 7, 1};
		double abs_tol = quant == SPARCML_QUANT_NONE ? 0 : 1.01 * g_size * scale / levels[quant];
		double rel_tol = dtype == SPARCML_FLOAT64 ? 1e-14 : 1e-6;
		size_t bad = 0, first = 0;
		for (size_t i = 0; i < n; i++) {
			double got = load(buf, dtype, i);
			int sent_somewhere = 0;
			for (int q = 0; q < g_size; q++)
				sent_somewhere |= r.sent[q][i] != 0;
			int ok = quant == SPARCML_QUANT_NONE ? close_to(got, avg[i], rel_tol)
							     : fabs(got - avg[i]) <= abs_tol && (sent_somewhere || got == 0);
			if (!ok && bad++ == 0)
				first = i;
		}
		CHECK(bad == 0, "%s step %d: %zu of %zu averages wrong, first [%zu] = %.9g, want %.9g", name, t, bad, n,
		      first, load(buf, dtype, first), avg[first]);
		/* The residual is exact whatever the encoding (its error is not
		 * fed back). */
		CHECK_OK(sparcml_compressor_residual(comp, res, n));
		bad = 0;
		for (size_t i = 0; i < n; i++)
			if (load(res, dtype, i) != r.residual[g_rank][i] && bad++ == 0)
				first = i;
		CHECK(bad == 0, "%s step %d: %zu residual entries wrong, first [%zu] = %.9g, want %.9g", name, t, bad,
		      first, load(res, dtype, first), r.residual[g_rank][first]);
	}
	CHECK_OK(sparcml_compressor_destroy(comp));
	ref_free(&r);
	free(buf), free(res), free(avg);
}

static void run_against_reference(const char *name, int test, size_t n, sparcml_dtype dtype, double density,
				  int ef, sparcml_quant quant, int steps)
{
	run_steps(name, test, n, dtype, density, ef, quant, steps, 0);
}

/* Density 1 sends everything: the average is the dense allreduce's. */
static void density_one_is_dense_average(void)
{
	const size_t n = 1000;
	sparcml_compressor *comp = NULL;
	CHECK_OK(sparcml_compressor_create(g_comm, n, SPARCML_FLOAT32, 1.0, SPARCML_QUANT_NONE, 1,
					   SPARCML_SELECT_EXACT, &comp));
	float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *res = malloc(n * sizeof *res);
	for (int t = 0; t < 2 && comp; t++) {
		grad_of(a, SPARCML_FLOAT32, 900, g_rank, t, n);
		memcpy(b, a, n * sizeof *a);
		CHECK_OK(sparcml_compressor_reduce(comp, a, n));
		CHECK_OK(sparcml_allreduce(g_comm, b, n, SPARCML_FLOAT32, SPARCML_AVG));
		CHECK_OK(sparcml_compressor_residual(comp, res, n));
		for (size_t i = 0; i < n; i++)
			if (!close_to(a[i], b[i], 1e-6) || res[i] != 0) {
				CHECK(0, "density 1 step %d: [%zu] = %g, dense average %g, residual %g", t, i, a[i], b[i],
				      res[i]);
				break;
			}
	}
	CHECK_OK(sparcml_compressor_destroy(comp));
	free(a), free(b), free(res);
}

/* Any selection method with error feedback conserves the gradient: over
 * the ranks, what was sent (size times the averages) plus what is kept
 * (the residuals) is the sum of every gradient given. */
static void methods_conserve(void)
{
	static const sparcml_select methods[] = {SPARCML_SELECT_SAMPLED, SPARCML_SELECT_REUSE,
						 SPARCML_SELECT_RANDOM};
	const size_t n = 20000;
	const int steps = 3;
	float *g = malloc(n * sizeof *g), *res = malloc(n * sizeof *res);
	double *given = malloc(n * sizeof *given), *sent = malloc(n * sizeof *sent);
	for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
		sparcml_compressor *comp = NULL;
		CHECK_OK(sparcml_compressor_create(g_comm, n, SPARCML_FLOAT32, 0.05, SPARCML_QUANT_NONE, 1,
						   methods[m], &comp));
		if (!comp)
			continue;
		memset(given, 0, n * sizeof *given);
		memset(sent, 0, n * sizeof *sent);
		size_t nonzero = 0;
		for (int t = 0; t < steps; t++) {
			for (int q = 0; q < g_size; q++)
				for (size_t i = 0; i < n; i++)
					given[i] += grad_value(950 + (int)m, q, t, i, n);
			grad_of(g, SPARCML_FLOAT32, 950 + (int)m, g_rank, t, n);
			CHECK_OK(sparcml_compressor_reduce(comp, g, n));
			for (size_t i = 0; i < n; i++) {
				sent[i] += (double)g[i] * g_size;
				nonzero += g[i] != 0;
			}
		}
		CHECK_OK(sparcml_compressor_residual(comp, res, n));
		double *kept = malloc(n * sizeof *kept);
		for (size_t i = 0; i < n; i++)
			kept[i] = res[i];
		CHECK_OK(sparcml_allreduce(g_comm, kept, n, SPARCML_FLOAT64, SPARCML_SUM));
		for (size_t i = 0; i < n; i++)
			if (!close_to(sent[i] + kept[i], given[i], 1e-5) && fabs(sent[i] + kept[i] - given[i]) > 1e-4) {
				CHECK(0, "method %d: [%zu] sent %g + kept %g != given %g", (int)methods[m], i, sent[i],
				      kept[i], given[i]);
				break;
			}
		/* Something was sent, and far from everything. */
		CHECK(nonzero > 0 && nonzero < (size_t)steps * n / 2, "method %d: %zu nonzero averages", (int)methods[m],
		      nonzero);
		if (methods[m] == SPARCML_SELECT_RANDOM)
			CHECK(nonzero == (size_t)steps * select_count(n, 0.05) || nonzero < (size_t)steps * select_count(n, 0.05),
			      "random: the ranks chose different entries (%zu nonzero)", nonzero);
		CHECK_OK(sparcml_compressor_destroy(comp));
		free(kept);
	}
	free(g), free(res), free(given), free(sent);
}

/* SPARCML_SCOPE_GLOBAL: the first step (an exact global selection) keeps
 * exactly ceil(density * n) entries, the later ones about as many, and
 * error feedback conserves the gradient: over the ranks, what was kept
 * (size times the averages, to the rounding of the division) plus the
 * residuals is the sum of every gradient given, each rank's dropped selection back in its residual. A
 * scope that differs between ranks, or is unknown, fails the create. */
static void global_scope(void)
{
	const size_t n = 20000, k = select_count(n, 0.05);
	const int steps = 3;
	float *g = malloc(n * sizeof *g), *res = malloc(n * sizeof *res);
	double *given = calloc(n, sizeof *given), *sent = calloc(n, sizeof *sent), *kept = malloc(n * sizeof *kept);
	sparcml_compressor *comp = NULL;
	CHECK_OK(sparcml_compressor_create_scoped(g_comm, n, SPARCML_FLOAT32, 0.05, SPARCML_QUANT_NONE, 1,
						  SPARCML_SELECT_EXACT, SPARCML_SCOPE_GLOBAL, &comp));
	for (int t = 0; t < steps && comp; t++) {
		for (int q = 0; q < g_size; q++)
			for (size_t i = 0; i < n; i++)
				given[i] += grad_value(960, q, t, i, n);
		grad_of(g, SPARCML_FLOAT32, 960, g_rank, t, n);
		CHECK_OK(sparcml_compressor_reduce(comp, g, n));
		size_t nonzero = 0;
		for (size_t i = 0; i < n; i++) {
			sent[i] += (double)g[i] * g_size;
			nonzero += g[i] != 0;
		}
		if (t == 0)
			CHECK(nonzero == k, "global step 0: %zu entries kept, want k = %zu", nonzero, k);
		else
			CHECK(nonzero > k / 2 && nonzero < 2 * k, "global step %d: %zu entries kept, want about %zu", t,
			      nonzero, k);
	}
	if (comp) {
		CHECK_OK(sparcml_compressor_residual(comp, res, n));
		for (size_t i = 0; i < n; i++)
			kept[i] = res[i];
		CHECK_OK(sparcml_allreduce(g_comm, kept, n, SPARCML_FLOAT64, SPARCML_SUM));
		for (size_t i = 0; i < n; i++)
			if (!close_to(sent[i] + kept[i], given[i], 1e-5) && fabs(sent[i] + kept[i] - given[i]) > 1e-4) {
				CHECK(0, "global: [%zu] sent %g + kept %g != given %g", i, sent[i], kept[i], given[i]);
				break;
			}
		/* A bad gradient on one rank fails the reduction on every rank,
		 * named as the global reduction. */
		int bg = bad_rank(529);
		int rc = sparcml_compressor_reduce(comp, g_rank == bg ? NULL : g, n);
		check_failed("NULL gradient, global scope", rc, bg, SPARCML_ERR_INVALID, "global-topk");
	}
	CHECK_OK(sparcml_compressor_destroy(comp));

	int b = bad_rank(530);
	comp = (sparcml_compressor *)0x1;
	int rc = sparcml_compressor_create_scoped(g_comm, 100, SPARCML_FLOAT32, 0.1, SPARCML_QUANT_NONE, 1,
						  SPARCML_SELECT_EXACT, g_rank == b ? (sparcml_scope)4 : SPARCML_SCOPE_GLOBAL,
						  &comp);
	CHECK(comp == NULL, "a failed create leaves a compressor");
	check_failed("unknown scope", rc, b, SPARCML_ERR_INVALID, "compressor-create");
	b = bad_rank(531);
	rc = sparcml_compressor_create_scoped(g_comm, 100, SPARCML_FLOAT32, 0.1, SPARCML_QUANT_NONE, 1,
					      SPARCML_SELECT_EXACT, g_rank == b ? SPARCML_SCOPE_UNION : SPARCML_SCOPE_GLOBAL,
					      &comp);
	CHECK(rc == SPARCML_ERR_MISMATCH && comp == NULL && strstr(sparcml_last_error(), "scope"),
	      "different scopes: %s: %s", sparcml_status_name(rc), sparcml_last_error());
	check_still_usable("different scopes");
	free(g), free(res), free(given), free(sent), free(kept);
}

/* One rank's bad create or reduce fails on every rank; ranks that create
 * differently all fail; the communicator stays usable. */
static void compressor_errors(void)
{
	int c = 500, b, rc;
	sparcml_compressor *comp = (sparcml_compressor *)0x1;

	b = bad_rank(++c);
	rc = sparcml_compressor_create(g_comm, 100, SPARCML_FLOAT32, g_rank == b ? 0.0 : 0.1, SPARCML_QUANT_NONE, 1,
				       SPARCML_SELECT_EXACT, &comp);
	CHECK(comp == NULL, "a failed create leaves a compressor");
	check_failed("density 0", rc, b, SPARCML_ERR_INVALID, "compressor-create");

	b = bad_rank(++c);
	rc = sparcml_compressor_create(g_comm, 100, SPARCML_FLOAT32, g_rank == b ? 1.5 : 0.1, SPARCML_QUANT_NONE, 1,
				       SPARCML_SELECT_EXACT, &comp);
	check_failed("density 1.5", rc, b, SPARCML_ERR_INVALID, "compressor-create");

	b = bad_rank(++c);
	rc = sparcml_compressor_create(g_comm, 100, SPARCML_FLOAT32, g_rank == b ? NAN : 0.1, SPARCML_QUANT_NONE, 1,
				       SPARCML_SELECT_EXACT, &comp);
	check_failed("density NaN", rc, b, SPARCML_ERR_INVALID, "compressor-create");

	b = bad_rank(++c);
	rc = sparcml_compressor_create(g_comm, 100, SPARCML_FLOAT32, 0.1,
				       g_rank == b ? (sparcml_quant)9 : SPARCML_QUANT_NONE, 1, SPARCML_SELECT_EXACT,
				       &comp);
	check_failed("unknown quant", rc, b, SPARCML_ERR_INVALID, "compressor-create");

	b = bad_rank(++c);
	rc = sparcml_compressor_create(g_comm, 100, g_rank == b ? (sparcml_dtype)5 : SPARCML_FLOAT32, 0.1,
				       SPARCML_QUANT_NONE, 1, SPARCML_SELECT_EXACT, &comp);
	check_failed("unknown dtype", rc, b, SPARCML_ERR_INVALID, "compressor-create");

	b = bad_rank(++c);
	rc = sparcml_compressor_create(g_comm, 100, SPARCML_FLOAT32, 0.1, SPARCML_QUANT_NONE, 1,
				       g_rank == b ? (sparcml_select)7 : SPARCML_SELECT_EXACT, &comp);
	check_failed("unknown method", rc, b, SPARCML_ERR_INVALID, "compressor-create");

	b = bad_rank(++c);
	rc = sparcml_compressor_create(g_comm, 100, SPARCML_FLOAT32, 0.1, SPARCML_QUANT_NONE, 1,
				       SPARCML_SELECT_EXACT, g_rank == b ? NULL : &comp);
	check_failed("NULL output pointer", rc, b, SPARCML_ERR_INVALID, "compressor-create");

	/* Valid but different on one rank: every rank sees every rank's
	 * arguments, so all fail alike, naming the argument. */
	b = bad_rank(++c);
	rc = sparcml_compressor_create(g_comm, 100, SPARCML_FLOAT32, g_rank == b ? 0.2 : 0.1, SPARCML_QUANT_NONE, 1,
				       SPARCML_SELECT_EXACT, &comp);
	CHECK(rc == SPARCML_ERR_MISMATCH && comp == NULL && strstr(sparcml_last_error(), "density") &&
		      strstr(sparcml_last_error(), "compressor-create"),
	      "different densities: %s: %s", sparcml_status_name(rc), sparcml_last_error());
	check_still_usable("different densities");

	CHECK(sparcml_compressor_create(NULL, 100, SPARCML_FLOAT32, 0.1, SPARCML_QUANT_NONE, 1, SPARCML_SELECT_EXACT,
					&comp) == SPARCML_ERR_INVALID, "create on a NULL comm");

	/* Reductions. */
	float x[100] = {0}, y[100];
	CHECK_OK(sparcml_compressor_create(g_comm, 100, SPARCML_FLOAT32, 0.1, SPARCML_QUANT_NONE, 1,
					   SPARCML_SELECT_EXACT, &comp));
	int b1 = bad_rank(++c);
	for (int i = 0; i < 100; i++)
		x[i] = (float)i;
	rc = sparcml_compressor_reduce(comp, g_rank == b1 ? NULL : x, 100);
	check_failed("NULL gradient", rc, b1, SPARCML_ERR_INVALID, "sparse-allreduce");
	/* A rank whose call started took the whole gradient into the residual
	 * and left its buffer at zero; the bad rank took nothing. */
	int took1 = g_rank != b1;
	for (int i = 0; i < 100; i++)
		if (x[i] != (took1 ? 0.0f : (float)i)) {
			CHECK(0, "gradient after a failed reduction: [%d] = %g, want %g", i, x[i],
			      took1 ? 0.0 : (double)i);
			break;
		}
	int b2 = bad_rank(++c);
	rc = sparcml_compressor_reduce(comp, x, g_rank == b2 ? 99 : 100);
	check_failed("wrong count", rc, b2, SPARCML_ERR_INVALID, "sparse-allreduce");
	/* Nothing was lost: the residual holds every gradient a started call
	 * took, once (the second call's buffer is zero where the first took). */
	int took2 = g_rank != b2 && !took1;
	CHECK_OK(sparcml_compressor_residual(comp, y, 100));
	float times = (float)(took1 + took2);
	for (int i = 0; i < 100; i++)
		if (y[i] != times * (float)i) {
			CHECK(0, "residual after failed reductions: [%d] = %g, want %g", i, y[i], times * (float)i);
			break;
		}
	CHECK(sparcml_compressor_residual(comp, y, 50) == SPARCML_ERR_INVALID, "residual with the wrong count");
	CHECK(sparcml_compressor_residual(comp, NULL, 100) == SPARCML_ERR_INVALID, "residual into NULL");
	CHECK(sparcml_compressor_reduce(NULL, x, 100) == SPARCML_ERR_INVALID, "reduce with a NULL compressor");
	CHECK(sparcml_compressor_residual(NULL, y, 100) == SPARCML_ERR_INVALID, "residual of a NULL compressor");
	CHECK_OK(sparcml_compressor_destroy(comp));
	CHECK_OK(sparcml_compressor_destroy(NULL));
}

void test_compressor(void)
{
	if (g_size > MAXR)
		return;
	density_one_is_dense_average();
	run_against_reference("top-10% EF float32", 910, 1000, SPARCML_FLOAT32, 0.1, 1, SPARCML_QUANT_NONE, 3);
	run_against_reference("top-5% no EF float64", 911, 777, SPARCML_FLOAT64, 0.05, 0, SPARCML_QUANT_NONE, 2);
	run_steps("top-10% EF float32, started", 913, 1000, SPARCML_FLOAT32, 0.1, 1, SPARCML_QUANT_NONE, 3, 1);
	run_steps("top-5% EF float64 q8, started", 914, 777, SPARCML_FLOAT64, 0.05, 1, SPARCML_QUANT_Q8, 2, 1);
	run_against_reference("top-1% EF float32, large", 912, 300000, SPARCML_FLOAT32, 0.01, 1, SPARCML_QUANT_NONE,
			      2);
	static const sparcml_quant quants[] = {SPARCML_QUANT_FP16, SPARCML_QUANT_BF16, SPARCML_QUANT_Q8,
					       SPARCML_QUANT_Q4, SPARCML_QUANT_Q2};
	for (size_t q = 0; q < sizeof quants / sizeof quants[0]; q++) {
		char name[64];
		snprintf(name, sizeof name, "top-20%% EF quant %d", (int)quants[q]);
		run_against_reference(name, 920 + (int)q, 2000, SPARCML_FLOAT32, 0.2, 1, quants[q], 2);
	}
	methods_conserve();
	global_scope();
	compressor_errors();
}
