/*
 * ctest.h: helpers of the C ABI's multi-rank test program. Every rank
 * derives every rank's input from a seed, so each computes the expected
 * result of every collective locally and checks the library's against it.
 */
#ifndef SPARCML_CTEST_H
#define SPARCML_CTEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sparcml.h>

extern int g_rank, g_size, g_failures;
extern sparcml_comm *g_comm;

/* CHECK records a failure (with this rank and the location) and goes on,
 * so one wrong result does not hide the others; the ranks agree on the
 * total at the end. */
#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		g_failures++; \
		fprintf(stderr, "FAIL rank %d %s:%d: ", g_rank, __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__); \
		fprintf(stderr, "\n"); \
	} \
} while (0)

/* CHECK_OK checks that a call returned SPARCML_OK. */
#define CHECK_OK(call) do { \
	int rc_ = (call); \
	CHECK(rc_ == SPARCML_OK, "%s returned %s: %s", #call, \
	      sparcml_status_name(rc_), sparcml_last_error()); \
} while (0)

/* splitmix64: the deterministic generator of every input. */
static inline uint64_t mix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline uint64_t seed_of(int test, int rank)
{
	return ((uint64_t)test << 20) ^ (uint64_t)rank ^ 0x5EED;
}

/* Small integers, so sums are exact whatever order the library reduces in. */
static inline double small_int(uint64_t *s)
{
	return (double)(int)(mix64(s) % 17) - 8.0;
}

/* Element i of rank r's input of a test, as a double. */
void fill_input(double *dst, size_t n, int test, int rank);

/* Writes n doubles into a buffer of dtype. */
void store(void *buf, sparcml_dtype dtype, const double *src, size_t n);
/* Element i of a buffer of dtype. */
double load(const void *buf, sparcml_dtype dtype, size_t i);
size_t dtype_size(sparcml_dtype dtype);
const char *dtype_name(sparcml_dtype dtype);

/* Error cases (errors.c): the rank a case c makes bad (never 0); that the
 * communicator still reduces correctly; that a case failed with want_bad
 * on the bad rank (every rank if bad < 0) and, naming it, on the others. */
int bad_rank(int c);
void check_still_usable(const char *after);
void check_failed(const char *name, int rc, int bad, int want_bad, const char *op);

/* The test groups (one file each). */
void test_dense(void);
void test_sparse(void);
void test_sparse_rows(void);
void test_nonblocking(void);
void test_errors(void);
void test_compressor(void);
void test_p2p(void);
void test_abort(void);

#endif
