/*
 * capi.h: the layout of the C ABI's handles and the helpers shared by the
 * Go exports (capi/*.go) and the public functions (sparcml.c). Private to
 * the library: applications see only include/sparcml.h, where these
 * structs are opaque.
 */
#ifndef SPARCML_CAPI_H
#define SPARCML_CAPI_H

#include <stdint.h>
#include <stdlib.h>
#include "sparcml.h"

/* A communicator: the Go communicator's handle (runtime/cgo.Handle) and
 * its rank and size, kept here so that sparcml_rank and sparcml_size do
 * not enter the Go runtime. */
struct sparcml_comm {
	uintptr_t handle;
	int rank;
	int size;
	double timeout; /* seconds; > 0: each later operation's deadline (sparcml_set_timeout) */
};

/* A request: the handle of the Go request state. */
struct sparcml_request {
	uintptr_t handle;
};

/* A compressor: the handle of the Go compressor state. */
struct sparcml_compressor {
	uintptr_t handle;
};

/* A sparse result: the arrays live in C memory (malloc), so the caller
 * never holds a Go pointer. The Go side writes into them in place and
 * grows them (realloc) when a result does not fit. */
struct sparcml_result {
	uint64_t dim;
	size_t nnz;
	int dense;
	int dtype;
	int busy;               /* a pending request will fill it */
	size_t width;           /* values per index (1: element result) */
	uint32_t *indices;
	size_t indices_cap;     /* in elements */
	void *values;
	size_t values_cap;      /* in bytes */
};

/* Records this thread's last error (copies the strings). */
void sparcml_capi_set_error(int code, int rank, int peer, uint64_t seq,
			    const char *op, size_t oplen,
			    const char *msg, size_t msglen);

#endif
