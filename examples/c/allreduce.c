/*
 * A minimal sparcml program in C: every rank contributes a gradient, the
 * dense allreduce averages it, and a sparse allreduce sums a few entries
 * per rank. Build with the Makefile next to this file (pkg-config), run
 * with `sparcml run -n 3 -- ./allreduce`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sparcml.h>

static int fail(const char *what, int rc)
{
	fprintf(stderr, "%s: %s: %s\n", what, sparcml_status_name(rc), sparcml_last_error());
	return 1;
}

int main(void)
{
	sparcml_comm *comm;
	int rc = sparcml_init(&comm); /* rank, size and rendezvous from the launcher */
	if (rc != SPARCML_OK)
		return fail("init", rc);
	int rank = sparcml_rank(comm), size = sparcml_size(comm);

	/* Dense: average a gradient of n floats in place. */
	size_t n = 1 << 20;
	float *grad = malloc(n * sizeof *grad);
	for (size_t i = 0; i < n; i++)
		grad[i] = (float)rank;
	rc = sparcml_allreduce(comm, grad, n, SPARCML_FLOAT32, SPARCML_AVG);
	if (rc != SPARCML_OK)
		return fail("allreduce", rc);

	/* Sparse: each rank brings two entries of a vector of dimension dim
	 * (indices strictly increasing); the sum arrives dense. */
	uint64_t dim = 1000;
	uint32_t idx[2] = {(uint32_t)rank, 500};
	float val[2] = {1, 1};
	float *sum = malloc(dim * sizeof *sum);
	rc = sparcml_sparse_allreduce(comm, dim, 2, idx, val, SPARCML_FLOAT32, sum);
	if (rc != SPARCML_OK)
		return fail("sparse allreduce", rc);

	if (rank == 0)
		printf("%d ranks: mean of the ranks %g (want %g), sparse sum at 0: %g, at 500: %g\n",
		       size, grad[0], (size - 1) / 2.0, sum[0], sum[500]);
	free(grad);
	free(sum);
	rc = sparcml_finalize(comm); /* collective: waits for every rank */
	return rc == SPARCML_OK ? 0 : fail("finalize", rc);
}
