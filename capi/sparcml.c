/*
 * sparcml.c: the public functions of include/sparcml.h. Each one that
 * needs the runtime forwards to a Go export (capi/*.go, declared in
 * _cgo_export.h); the ones that only read a handle's fields, and the
 * thread-local last error, are plain C. Defining them here, against the
 * public header, makes the compiler check every declaration of the ABI.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "capi.h"
#include "_cgo_export.h"

/* ---- Errors: one record per thread ----
 * A pthread key rather than a _Thread_local array: the library is often
 * dlopen'ed (Python's ctypes), where a large initial-exec TLS block does
 * not fit in the static TLS surplus. The record is allocated the first time
 * a thread fails and freed when the thread exits. */

struct last_error {
	int code;
	int rank;
	int peer;
	uint64_t seq;
	char op[64];
	char msg[4096];
};

static pthread_key_t error_key;
static pthread_once_t error_once = PTHREAD_ONCE_INIT;

static void make_error_key(void)
{
	pthread_key_create(&error_key, free);
}

/* This thread's record; NULL if it never failed (or, with create, if out
 * of memory). */
static struct last_error *error_record(int create)
{
	pthread_once(&error_once, make_error_key);
	struct last_error *e = pthread_getspecific(error_key);
	if (!e && create) {
		e = calloc(1, sizeof *e);
		if (e && pthread_setspecific(error_key, e) != 0) {
			free(e);
			e = NULL;
		}
	}
	return e;
}

static void copy_string(char *dst, size_t room, const char *src, size_t len)
{
	if (len >= room)
		len = room - 1;
	if (len > 0)
		memcpy(dst, src, len);
	dst[len] = '\0';
}

void sparcml_capi_set_error(int code, int rank, int peer, uint64_t seq,
			    const char *op, size_t oplen,
			    const char *msg, size_t msglen)
{
	struct last_error *e = error_record(1);
	if (!e)
		return; /* out of memory: the status code still says what failed */
	e->code = code;
	e->rank = rank;
	e->peer = peer;
	e->seq = seq;
	copy_string(e->op, sizeof e->op, op, oplen);
	copy_string(e->msg, sizeof e->msg, msg, msglen);
}

static int invalid_handle(const char *op, const char *what)
{
	char msg[128];
	int n = snprintf(msg, sizeof msg, "sparcml: %s: invalid argument: %s is NULL", op, what);
	sparcml_capi_set_error(SPARCML_ERR_INVALID, -1, -1, 0, op, strlen(op), msg, (size_t)n);
	return SPARCML_ERR_INVALID;
}

const char *sparcml_last_error(void)
{
	struct last_error *e = error_record(0);
	return e ? e->msg : "";
}

int sparcml_last_error_info(sparcml_error_info *info)
{
	if (!info)
		return invalid_handle("last_error_info", "info");
	struct last_error *e = error_record(0);
	info->code = e ? e->code : SPARCML_OK;
	info->rank = e ? e->rank : -1;
	info->peer = e ? e->peer : -1;
	info->seq = e ? e->seq : 0;
	info->op = e ? e->op : "";
	info->message = e ? e->msg : "";
	return SPARCML_OK;
}

const char *sparcml_status_name(int status)
{
	switch (status) {
	case SPARCML_OK: return "SPARCML_OK";
	case SPARCML_ERR_INVALID: return "SPARCML_ERR_INVALID";
	case SPARCML_ERR_MISMATCH: return "SPARCML_ERR_MISMATCH";
	case SPARCML_ERR_PEER_LOST: return "SPARCML_ERR_PEER_LOST";
	case SPARCML_ERR_TIMEOUT: return "SPARCML_ERR_TIMEOUT";
	case SPARCML_ERR_ABORTED: return "SPARCML_ERR_ABORTED";
	case SPARCML_ERR_CLOSED: return "SPARCML_ERR_CLOSED";
	case SPARCML_ERR_INIT: return "SPARCML_ERR_INIT";
	case SPARCML_ERR_NOT_DONE: return "SPARCML_ERR_NOT_DONE";
	case SPARCML_ERR_NOMEM: return "SPARCML_ERR_NOMEM";
	case SPARCML_ERR_INTERNAL: return "SPARCML_ERR_INTERNAL";
	}
	return "SPARCML_ERR_UNKNOWN";
}

int sparcml_version(int *major, int *minor)
{
	if (major)
		*major = SPARCML_VERSION_MAJOR;
	if (minor)
		*minor = SPARCML_VERSION_MINOR;
	return SPARCML_OK;
}

const char *sparcml_build_version(void)
{
	return sparcmlGoBuildVersion();
}

/* ---- Communicators ---- */

int sparcml_init(sparcml_comm **comm)
{
	return sparcmlGoInit(comm, -1, -1, NULL, NULL);
}

int sparcml_init_with(sparcml_comm **comm, int rank, int size,
		      const char *addr, const char *token)
{
	return sparcmlGoInit(comm, rank, size, (char *)addr, (char *)token);
}

int sparcml_finalize(sparcml_comm *comm)
{
	if (!comm)
		return SPARCML_OK;
	return sparcmlGoFinalize(comm);
}

int sparcml_abort(sparcml_comm *comm, const char *reason)
{
	return sparcmlGoAbort(comm, (char *)reason);
}

int sparcml_rank(const sparcml_comm *comm)
{
	if (!comm)
		return -invalid_handle("rank", "comm");
	return comm->rank;
}

int sparcml_size(const sparcml_comm *comm)
{
	if (!comm)
		return -invalid_handle("size", "comm");
	return comm->size;
}

int sparcml_fail(sparcml_comm *comm, const char *operation, const char *reason)
{
	return sparcmlGoFail(comm, (char *)operation, (char *)reason);
}

/* ---- Dense collectives ---- */

int sparcml_allreduce(sparcml_comm *comm, void *buf, size_t count,
		      sparcml_dtype dtype, sparcml_op op)
{
	return sparcmlGoAllreduce(comm, buf, count, (int)dtype, (int)op, NULL);
}

int sparcml_start_allreduce(sparcml_comm *comm, void *buf, size_t count,
			    sparcml_dtype dtype, sparcml_op op,
			    sparcml_request **req)
{
	if (!req)
		return sparcmlGoFail(comm, "allreduce", "req is NULL");
	return sparcmlGoAllreduce(comm, buf, count, (int)dtype, (int)op, req);
}

int sparcml_reduce_scatter(sparcml_comm *comm, const void *sendbuf,
			   void *recvbuf, size_t recvcount,
			   sparcml_dtype dtype, sparcml_op op)
{
	return sparcmlGoReduceScatter(comm, (void *)sendbuf, recvbuf, recvcount,
				      (int)dtype, (int)op, NULL);
}

int sparcml_start_reduce_scatter(sparcml_comm *comm, const void *sendbuf,
				 void *recvbuf, size_t recvcount,
				 sparcml_dtype dtype, sparcml_op op,
				 sparcml_request **req)
{
	if (!req)
		return sparcmlGoFail(comm, "reduce-scatter", "req is NULL");
	return sparcmlGoReduceScatter(comm, (void *)sendbuf, recvbuf, recvcount,
				      (int)dtype, (int)op, req);
}

int sparcml_allgather(sparcml_comm *comm, const void *sendbuf,
		      void *recvbuf, size_t sendcount, sparcml_dtype dtype)
{
	return sparcmlGoAllgather(comm, (void *)sendbuf, sendcount, recvbuf,
				  NULL, (int)dtype, NULL);
}

int sparcml_start_allgather(sparcml_comm *comm, const void *sendbuf,
			    void *recvbuf, size_t sendcount,
			    sparcml_dtype dtype, sparcml_request **req)
{
	if (!req)
		return sparcmlGoFail(comm, "allgather", "req is NULL");
	return sparcmlGoAllgather(comm, (void *)sendbuf, sendcount, recvbuf,
				  NULL, (int)dtype, req);
}

int sparcml_allgatherv(sparcml_comm *comm, const void *sendbuf,
		       size_t sendcount, void *recvbuf,
		       const size_t *recvcounts, sparcml_dtype dtype)
{
	if (!recvcounts)
		return sparcmlGoFail(comm, "allgatherv", "recvcounts is NULL");
	return sparcmlGoAllgather(comm, (void *)sendbuf, sendcount, recvbuf,
				  (size_t *)recvcounts, (int)dtype, NULL);
}

int sparcml_start_allgatherv(sparcml_comm *comm, const void *sendbuf,
			     size_t sendcount, void *recvbuf,
			     const size_t *recvcounts, sparcml_dtype dtype,
			     sparcml_request **req)
{
	if (!req)
		return sparcmlGoFail(comm, "allgatherv", "req is NULL");
	*req = NULL;
	if (!recvcounts)
		return sparcmlGoFail(comm, "allgatherv", "recvcounts is NULL");
	return sparcmlGoAllgather(comm, (void *)sendbuf, sendcount, recvbuf,
				  (size_t *)recvcounts, (int)dtype, req);
}

int sparcml_broadcast(sparcml_comm *comm, void *buf, size_t count,
		      sparcml_dtype dtype, int root)
{
	return sparcmlGoBroadcast(comm, buf, count, (int)dtype, root, NULL);
}

int sparcml_start_broadcast(sparcml_comm *comm, void *buf, size_t count,
			    sparcml_dtype dtype, int root,
			    sparcml_request **req)
{
	if (!req)
		return sparcmlGoFail(comm, "broadcast", "req is NULL");
	return sparcmlGoBroadcast(comm, buf, count, (int)dtype, root, req);
}

int sparcml_barrier(sparcml_comm *comm)
{
	return sparcmlGoBarrier(comm, NULL);
}

int sparcml_start_barrier(sparcml_comm *comm, sparcml_request **req)
{
	if (!req)
		return sparcmlGoFail(comm, "barrier", "req is NULL");
	return sparcmlGoBarrier(comm, req);
}

/* ---- Sparse allreduce ---- */

int sparcml_sparse_allreduce(sparcml_comm *comm, uint64_t dim, size_t nnz,
			     const uint32_t *indices, const void *values,
			     sparcml_dtype dtype, void *dense_out)
{
	return sparcmlGoSparseAllreduce(comm, dim, 0, nnz, (uint32_t *)indices,
					(void *)values, (int)dtype, dense_out,
					NULL, NULL);
}

int sparcml_start_sparse_allreduce(sparcml_comm *comm, uint64_t dim,
				   size_t nnz, const uint32_t *indices,
				   const void *values, sparcml_dtype dtype,
				   void *dense_out, sparcml_request **req)
{
	if (!req)
		return sparcmlGoFail(comm, "sparse-allreduce", "req is NULL");
	return sparcmlGoSparseAllreduce(comm, dim, 0, nnz, (uint32_t *)indices,
					(void *)values, (int)dtype, dense_out,
					NULL, req);
}

int sparcml_sparse_allreduce_result(sparcml_comm *comm, uint64_t dim,
				    size_t nnz, const uint32_t *indices,
				    const void *values, sparcml_dtype dtype,
				    sparcml_result *result)
{
	if (!result)
		return sparcmlGoFail(comm, "sparse-allreduce", "result is NULL");
	return sparcmlGoSparseAllreduce(comm, dim, 0, nnz, (uint32_t *)indices,
					(void *)values, (int)dtype, NULL,
					result, NULL);
}

int sparcml_start_sparse_allreduce_result(sparcml_comm *comm, uint64_t dim,
					  size_t nnz, const uint32_t *indices,
					  const void *values,
					  sparcml_dtype dtype,
					  sparcml_result *result,
					  sparcml_request **req)
{
	if (!req)
		return sparcmlGoFail(comm, "sparse-allreduce", "req is NULL");
	*req = NULL;
	if (!result)
		return sparcmlGoFail(comm, "sparse-allreduce", "result is NULL");
	return sparcmlGoSparseAllreduce(comm, dim, 0, nnz, (uint32_t *)indices,
					(void *)values, (int)dtype, NULL,
					result, req);
}

int sparcml_sparse_allreduce_rows(sparcml_comm *comm, uint64_t rows,
				  size_t width, size_t nrows,
				  const uint32_t *row_indices,
				  const void *values, sparcml_dtype dtype,
				  sparcml_result *result)
{
	if (!result)
		return sparcmlGoFail(comm, "sparse-allreduce", "result is NULL");
	return sparcmlGoSparseAllreduce(comm, rows, width, nrows,
					(uint32_t *)row_indices, (void *)values,
					(int)dtype, NULL, result, NULL);
}

int sparcml_start_sparse_allreduce_rows(sparcml_comm *comm, uint64_t rows,
					size_t width, size_t nrows,
					const uint32_t *row_indices,
					const void *values,
					sparcml_dtype dtype,
					sparcml_result *result,
					sparcml_request **req)
{
	if (!req)
		return sparcmlGoFail(comm, "sparse-allreduce", "req is NULL");
	*req = NULL;
	if (!result)
		return sparcmlGoFail(comm, "sparse-allreduce", "result is NULL");
	return sparcmlGoSparseAllreduce(comm, rows, width, nrows,
					(uint32_t *)row_indices, (void *)values,
					(int)dtype, NULL, result, req);
}

/* ---- Sparse results ---- */

int sparcml_result_create(sparcml_result **result)
{
	if (!result)
		return invalid_handle("result_create", "result");
	*result = calloc(1, sizeof **result);
	if (!*result) {
		static const char msg[] = "sparcml: result_create: out of memory";
		sparcml_capi_set_error(SPARCML_ERR_NOMEM, -1, -1, 0, "result_create", 13,
				       msg, sizeof msg - 1);
		return SPARCML_ERR_NOMEM;
	}
	return SPARCML_OK;
}

void sparcml_result_free(sparcml_result *result)
{
	if (!result)
		return;
	free(result->indices);
	free(result->values);
	free(result);
}

uint64_t sparcml_result_dim(const sparcml_result *result)
{
	return result ? result->dim : 0;
}

int sparcml_result_is_dense(const sparcml_result *result)
{
	return result ? result->dense : 0;
}

size_t sparcml_result_nnz(const sparcml_result *result)
{
	return result ? result->nnz : 0;
}

const uint32_t *sparcml_result_indices(const sparcml_result *result)
{
	if (!result || result->dense || result->nnz == 0)
		return NULL;
	return result->indices;
}

const void *sparcml_result_values(const sparcml_result *result)
{
	if (!result || result->nnz == 0)
		return NULL;
	return result->values;
}

sparcml_dtype sparcml_result_dtype(const sparcml_result *result)
{
	return result ? (sparcml_dtype)result->dtype : SPARCML_FLOAT32;
}

size_t sparcml_result_width(const sparcml_result *result)
{
	return result && result->width ? result->width : 1;
}

/* ---- Gradient compression ---- */

int sparcml_compressor_create(sparcml_comm *comm, size_t count,
			      sparcml_dtype dtype, double density,
			      sparcml_quant quant, int error_feedback,
			      sparcml_select method, sparcml_compressor **comp)
{
	return sparcmlGoCompressorCreate(comm, count, (int)dtype, density,
					 (int)quant, error_feedback,
					 (int)method, comp);
}

int sparcml_compressor_create_scoped(sparcml_comm *comm, size_t count,
				     sparcml_dtype dtype, double density,
				     sparcml_quant quant, int error_feedback,
				     sparcml_select method, sparcml_scope scope,
				     sparcml_compressor **comp)
{
	return sparcmlGoCompressorCreateScoped(comm, count, (int)dtype, density,
					       (int)quant, error_feedback,
					       (int)method, (int)scope, comp);
}

int sparcml_compressor_reduce(sparcml_compressor *comp, void *buf,
			      size_t count)
{
	return sparcmlGoCompressorReduce(comp, buf, count, NULL);
}

int sparcml_compressor_start(sparcml_compressor *comp, void *buf,
			     size_t count, sparcml_request **req)
{
	if (!req)
		return invalid_handle("compressor-start", "req");
	return sparcmlGoCompressorReduce(comp, buf, count, req);
}

/* ---- Point to point, sub-communicators, deadlines ---- */

int sparcml_start_send(sparcml_comm *comm, const void *buf, size_t count,
		       sparcml_dtype dtype, int peer, sparcml_request **req)
{
	if (!req)
		return sparcmlGoFail(comm, "send", "req is NULL");
	return sparcmlGoP2P(comm, (void *)buf, count, (int)dtype, peer, 0, req);
}

int sparcml_start_recv(sparcml_comm *comm, void *buf, size_t count,
		       sparcml_dtype dtype, int peer, sparcml_request **req)
{
	if (!req)
		return sparcmlGoFail(comm, "recv", "req is NULL");
	return sparcmlGoP2P(comm, buf, count, (int)dtype, peer, 1, req);
}

int sparcml_comm_split(sparcml_comm *comm, int color, int key,
		       sparcml_comm **newcomm)
{
	return sparcmlGoSplit(comm, color, key, newcomm);
}

int sparcml_set_timeout(sparcml_comm *comm, double seconds)
{
	if (!comm)
		return invalid_handle("set-timeout", "comm");
	return sparcmlGoSetTimeout(comm, seconds);
}

int sparcml_compressor_residual(const sparcml_compressor *comp, void *out,
				size_t count)
{
	return sparcmlGoCompressorResidual((sparcml_compressor *)comp, out, count);
}

int sparcml_compressor_destroy(sparcml_compressor *comp)
{
	if (!comp)
		return SPARCML_OK;
	return sparcmlGoCompressorDestroy(comp);
}

/* ---- Requests ---- */

int sparcml_wait(sparcml_request **req, double timeout_seconds)
{
	if (!req || !*req)
		return invalid_handle("wait", "request");
	return sparcmlGoWait(req, timeout_seconds);
}

int sparcml_test(sparcml_request **req, int *done)
{
	if (!req || !*req)
		return invalid_handle("test", "request");
	if (!done)
		return invalid_handle("test", "done");
	*done = 0;
	return sparcmlGoTest(req, done);
}
