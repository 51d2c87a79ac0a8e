/*
 * Data-parallel SGD in C with sparcml's gradient compressor: each rank
 * holds its own shard of a least-squares problem, computes its gradient,
 * and reduces it with top-k 5% and error feedback instead of a dense
 * allreduce. The same steps run once more with the dense allreduce, from
 * the same start, for comparison. It exits with 1 unless both runs cut the
 * loss at least a hundredfold and every rank ends with the same
 * parameters. Build with the Makefile next to this file (pkg-config), run
 * with `sparcml run -n 3 -- ./topk_sgd`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sparcml.h>

enum { DIM = 1024, ROWS = 512, STEPS = 150 };
static const float LR = 0.3f;
static const double DENSITY = 0.05;

static int fail(const char *what, int rc)
{
	fprintf(stderr, "%s: %s: %s\n", what, sparcml_status_name(rc), sparcml_last_error());
	return 1;
}

/* A reproducible generator (xorshift), seeded by rank: no two shards alike. */
static unsigned long long rng_state;
static double uniform(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* This rank's shard: ROWS rows of random signs, targets from a planted
 * model shared by every rank, so the global minimum has loss 0. */
static void make_shard(int rank, float *x, float *y)
{
	float *planted = malloc(DIM * sizeof *planted);
	rng_state = 88172645463325252ULL;
	for (int j = 0; j < DIM; j++)
		planted[j] = (float)(2 * uniform() - 1);
	rng_state = 0x9E3779B97F4A7C15ULL * (unsigned long long)(rank + 1);
	for (int i = 0; i < ROWS; i++) {
		double dot = 0;
		for (int j = 0; j < DIM; j++) {
			x[i * DIM + j] = uniform() < 0.5 ? -1.0f : 1.0f;
			dot += x[i * DIM + j] * planted[j];
		}
		y[i] = (float)dot;
	}
	free(planted);
}

/* The local loss (half the mean squared residual) and its gradient. */
static double loss_and_grad(const float *x, const float *y, const float *w, float *grad)
{
	double loss = 0;
	memset(grad, 0, DIM * sizeof *grad);
	for (int i = 0; i < ROWS; i++) {
		const float *row = x + i * DIM;
		double r = -y[i];
		for (int j = 0; j < DIM; j++)
			r += row[j] * w[j];
		loss += r * r / 2;
		for (int j = 0; j < DIM; j++)
			grad[j] += (float)(r * row[j] / ROWS);
	}
	return loss / ROWS;
}

/* The loss over every rank's shard: the mean of the local losses. */
static int global_loss(sparcml_comm *comm, const float *x, const float *y, const float *w,
		       float *scratch, double *out)
{
	double loss = loss_and_grad(x, y, w, scratch);
	int rc = sparcml_allreduce(comm, &loss, 1, SPARCML_FLOAT64, SPARCML_AVG);
	*out = loss;
	return rc;
}

/* Whether every rank holds w: its element-wise min and max agree. */
static int same_everywhere(sparcml_comm *comm, const float *w, int *same)
{
	float *lo = malloc(DIM * sizeof *lo), *hi = malloc(DIM * sizeof *hi);
	memcpy(lo, w, DIM * sizeof *lo);
	memcpy(hi, w, DIM * sizeof *hi);
	int rc = sparcml_allreduce(comm, lo, DIM, SPARCML_FLOAT32, SPARCML_MIN);
	if (rc == SPARCML_OK)
		rc = sparcml_allreduce(comm, hi, DIM, SPARCML_FLOAT32, SPARCML_MAX);
	*same = rc == SPARCML_OK && memcmp(lo, hi, DIM * sizeof *lo) == 0;
	free(lo);
	free(hi);
	return rc;
}

/* Runs STEPS steps of SGD from w = 0, reducing each gradient with comp,
 * or with the dense allreduce if comp is NULL; sets *ok if the loss fell a
 * hundredfold and every rank ends with the same parameters. */
static int train(sparcml_comm *comm, sparcml_compressor *comp, const float *x, const float *y,
		 const char *name, int *ok)
{
	float *w = calloc(DIM, sizeof *w), *grad = malloc(DIM * sizeof *grad);
	double first, last;
	int same = 0, rc = global_loss(comm, x, y, w, grad, &first);
	for (int step = 0; rc == SPARCML_OK && step < STEPS; step++) {
		loss_and_grad(x, y, w, grad);
		rc = comp ? sparcml_compressor_reduce(comp, grad, DIM)
			  : sparcml_allreduce(comm, grad, DIM, SPARCML_FLOAT32, SPARCML_AVG);
		for (int j = 0; rc == SPARCML_OK && j < DIM; j++)
			w[j] -= LR * grad[j];
	}
	if (rc == SPARCML_OK)
		rc = global_loss(comm, x, y, w, grad, &last);
	if (rc == SPARCML_OK)
		rc = same_everywhere(comm, w, &same);
	if (rc == SPARCML_OK && sparcml_rank(comm) == 0)
		printf("%-22s loss %.4g -> %.4g after %d steps (%.0fx lower), parameters %s on every rank\n",
		       name, first, last, STEPS, first / last, same ? "the same" : "DIFFERENT");
	*ok = rc == SPARCML_OK && same && last * 100 <= first;
	free(w);
	free(grad);
	return rc;
}

int main(void)
{
	sparcml_comm *comm;
	int rc = sparcml_init(&comm);
	if (rc != SPARCML_OK)
		return fail("init", rc);
	float *x = malloc((size_t)ROWS * DIM * sizeof *x), *y = malloc(ROWS * sizeof *y);
	make_shard(sparcml_rank(comm), x, y);

	sparcml_compressor *comp;
	rc = sparcml_compressor_create(comm, DIM, SPARCML_FLOAT32, DENSITY, SPARCML_QUANT_NONE,
				       1 /* error feedback */, SPARCML_SELECT_EXACT, &comp);
	if (rc != SPARCML_OK)
		return fail("compressor_create", rc);
	int topk_ok = 0, dense_ok = 0;
	if ((rc = train(comm, comp, x, y, "top-k 5%, error fb:", &topk_ok)) != SPARCML_OK)
		return fail("top-k training", rc);
	if ((rc = train(comm, NULL, x, y, "dense allreduce:", &dense_ok)) != SPARCML_OK)
		return fail("dense training", rc);
	sparcml_compressor_destroy(comp);
	free(x);
	free(y);
	rc = sparcml_finalize(comm);
	if (rc != SPARCML_OK)
		return fail("finalize", rc);
	return topk_ok && dense_ok ? 0 : 1;
}
