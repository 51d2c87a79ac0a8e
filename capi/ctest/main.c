/*
 * The C ABI's multi-rank test: run under `sparcml run -n 3` (any size of
 * at least 2 works). Every collective's result is checked against the
 * value computed here from every rank's seeded input; every bad call is
 * checked to fail on every rank, never to crash or hang (the launcher's
 * --timeout and SPARCML_TIMEOUT bound the run). Exits 0 only when every
 * rank saw every check pass.
 *
 * With --rank R --size N --addr HOST:PORT --token T it joins through
 * sparcml_init_with instead of the launcher's environment.
 */
#include "ctest.h"

int g_rank, g_size, g_failures;
sparcml_comm *g_comm;

void fill_input(double *dst, size_t n, int test, int rank)
{
	uint64_t s = seed_of(test, rank);
	for (size_t i = 0; i < n; i++)
		dst[i] = small_int(&s);
}

size_t dtype_size(sparcml_dtype dtype)
{
	return dtype == SPARCML_FLOAT64 ? 8 : 4;
}

const char *dtype_name(sparcml_dtype dtype)
{
	return dtype == SPARCML_FLOAT64 ? "float64" : "float32";
}

void store(void *buf, sparcml_dtype dtype, const double *src, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (dtype == SPARCML_FLOAT64)
			((double *)buf)[i] = src[i];
		else
			((float *)buf)[i] = (float)src[i];
	}
}

double load(const void *buf, sparcml_dtype dtype, size_t i)
{
	if (dtype == SPARCML_FLOAT64)
		return ((const double *)buf)[i];
	return ((const float *)buf)[i];
}

static void test_version_and_init_errors(void)
{
	int major = -1, minor = -1;
	CHECK_OK(sparcml_version(&major, &minor));
	CHECK(major == SPARCML_VERSION_MAJOR && minor == SPARCML_VERSION_MINOR,
	      "library version %d.%d, header %d.%d", major, minor,
	      SPARCML_VERSION_MAJOR, SPARCML_VERSION_MINOR);
	CHECK_OK(sparcml_version(NULL, NULL));
	const char *build = sparcml_build_version();
	CHECK(build != NULL && build[0] != '\0', "build version is empty");
	if (getenv("CTEST_BUILD_VERSION"))
		CHECK(strcmp(build, getenv("CTEST_BUILD_VERSION")) == 0, "build version %s, built as %s",
		      build, getenv("CTEST_BUILD_VERSION"));
	CHECK(strcmp(sparcml_status_name(SPARCML_ERR_MISMATCH), "SPARCML_ERR_MISMATCH") == 0, "status name");
	CHECK(strcmp(sparcml_status_name(12345), "SPARCML_ERR_UNKNOWN") == 0, "unknown status name");

	/* Local failures before any communicator exists. */
	sparcml_comm *bad = (sparcml_comm *)0x1;
	int rc = sparcml_init_with(&bad, 5, 3, "127.0.0.1:1", "t");
	CHECK(rc == SPARCML_ERR_INIT && bad == NULL, "init_with rank 5 of 3: %s, comm %p",
	      sparcml_status_name(rc), (void *)bad);
	CHECK(strstr(sparcml_last_error(), "rank") != NULL, "init error text: %s", sparcml_last_error());
	sparcml_error_info info;
	CHECK_OK(sparcml_last_error_info(&info));
	CHECK(info.code == SPARCML_ERR_INIT && strcmp(info.op, "init") == 0,
	      "init error info: code %d op %s", info.code, info.op);
	CHECK(sparcml_init(NULL) == SPARCML_ERR_INVALID,
	      "init(NULL) must fail");
	CHECK(sparcml_last_error_info(NULL) == SPARCML_ERR_INVALID, "last_error_info(NULL)");
	CHECK(sparcml_rank(NULL) == -SPARCML_ERR_INVALID, "rank(NULL)");
	CHECK(sparcml_size(NULL) == -SPARCML_ERR_INVALID, "size(NULL)");
	CHECK(sparcml_finalize(NULL) == SPARCML_OK, "finalize(NULL) is a no-op");
}

/* The ranks agree on whether every check passed: a failure anywhere makes
 * every rank exit non-zero. */
static int agree_on_failures(void)
{
	double failed = g_failures;
	int rc = sparcml_allreduce(g_comm, &failed, 1, SPARCML_FLOAT64, SPARCML_SUM);
	if (rc != SPARCML_OK) {
		fprintf(stderr, "rank %d: final allreduce: %s\n", g_rank, sparcml_last_error());
		return 1;
	}
	return failed != 0;
}

int main(int argc, char **argv)
{
	int rank = -1, size = -1;
	const char *addr = NULL, *token = NULL;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--rank"))
			rank = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--size"))
			size = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--addr"))
			addr = argv[i + 1];
		else if (!strcmp(argv[i], "--token"))
			token = argv[i + 1];
	}
	test_version_and_init_errors();
	int rc = rank >= 0 ? sparcml_init_with(&g_comm, rank, size, addr, token)
			   : sparcml_init(&g_comm);
	if (rc != SPARCML_OK) {
		fprintf(stderr, "init: %s: %s\n", sparcml_status_name(rc), sparcml_last_error());
		return 2;
	}
	g_rank = sparcml_rank(g_comm);
	g_size = sparcml_size(g_comm);
	if (rank >= 0)
		CHECK(g_rank == rank && g_size == size, "init_with: rank %d size %d", g_rank, g_size);
	if (g_size < 2) {
		fprintf(stderr, "run with at least 2 ranks\n");
		return 2;
	}
	test_dense();
	test_sparse();
	test_sparse_rows();
	test_nonblocking();
	test_errors();
	test_compressor();
	test_p2p();
	int failed = agree_on_failures();
	if (g_rank == 0)
		printf("%s: %d ranks, %s\n", argv[0], g_size, failed ? "FAILED" : "every check passed on every rank");
	/* After the agreement: the job cannot agree on anything once aborted,
	 * so each rank reports its own result through its exit status. */
	test_abort();
	rc = sparcml_finalize(g_comm); /* after an abort it may report the loss, but must return */
	if (g_failures)
		fprintf(stderr, "rank %d: %d checks failed\n", g_rank, g_failures);
	return failed || g_failures;
}
