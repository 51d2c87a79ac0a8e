/*
 * sparcml.h: the C ABI of sparcml, a communication runtime for distributed
 * machine learning (dense and sparse collectives over TCP or RDMA).
 *
 * This header is the ABI: libsparcml.so (built by `make lib` from the Go
 * package capi/) implements exactly the functions declared here, and the C
 * compiler checks every definition against these declarations when the
 * library is built. Link with `pkg-config --cflags --libs sparcml`.
 *
 * Conventions
 *
 *   - Every function returns SPARCML_OK (0) or a sparcml_status error code,
 *     except the few documented otherwise (sparcml_rank, sparcml_size,
 *     sparcml_last_error and the result accessors).
 *   - On failure, sparcml_last_error() gives the calling thread's error text,
 *     naming this rank, the peer involved, the operation and its sequence
 *     number; sparcml_last_error_info() gives the same as fields. Successful
 *     calls leave them unchanged (as errno).
 *   - Collectives are matched across ranks by the order in which they are
 *     started: every rank must start the same collectives, with the same
 *     counts, element type, reduction and root, in the same order. Ranks
 *     that do not fail with SPARCML_ERR_MISMATCH (or SPARCML_ERR_ABORTED
 *     where another rank detected it first) instead of computing a wrong
 *     result.
 *   - A call whose arguments are invalid on one rank only (a NULL buffer, an
 *     unknown element type) fails on that rank with SPARCML_ERR_INVALID and
 *     fails the same operation on the other ranks at once (they get
 *     SPARCML_ERR_ABORTED, naming the rank and its reason), so no rank is
 *     left waiting for the bad one until its deadline. (A rank whose part
 *     of the collective does not depend on the bad rank, such as the root
 *     of a broadcast, may complete it.) The communicator stays usable.
 *   - Every operation is bounded by the communicator's default timeout
 *     (SPARCML_TIMEOUT, 5 minutes unless set): past it the operation fails
 *     on every rank with SPARCML_ERR_TIMEOUT. A peer that dies fails every
 *     pending and later operation with SPARCML_ERR_PEER_LOST.
 *
 * Memory
 *
 *   Buffers are used in place, never copied: the library reads and writes
 *   the caller's memory directly for the duration of a blocking call. It
 *   keeps no pointer to caller memory after a blocking call returns. For a
 *   non-blocking call (sparcml_start_*), every buffer passed must stay
 *   valid and untouched until sparcml_test or sparcml_wait has reported the
 *   request complete. Counts are in elements, not bytes.
 *
 * Threads
 *
 *   All functions may be called from any thread, and the library's state
 *   is protected internally: concurrent calls never corrupt memory. But
 *   since collectives are matched by start order, the calls that start a
 *   collective on one communicator (blocking or sparcml_start_*) must be
 *   issued in the same order on every rank: from one thread, or from
 *   several under the application's own lock with a deterministic order.
 *   sparcml_wait and sparcml_test on different requests may run
 *   concurrently from any threads (each request by one thread at a time),
 *   also while another thread starts collectives. sparcml_rank,
 *   sparcml_size, sparcml_version and sparcml_last_error are always safe.
 *   sparcml_finalize must not run concurrently with any other call on the
 *   same communicator.
 *
 * Environment
 *
 *   sparcml_init reads the launcher's environment (sparcml run, torchrun,
 *   mpirun, srun; SPARCML_* variables, see docs/CONFIGURATION.md). The Go
 *   runtime inside the library copies the process environment when the
 *   library is loaded: variables set later (setenv) are not seen.
 *   A process must not call into the library after fork() in the child.
 */
#ifndef SPARCML_H
#define SPARCML_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the ABI this header describes. A library whose major
 * version differs is incompatible; a newer minor version only adds. */
#define SPARCML_VERSION_MAJOR 0
#define SPARCML_VERSION_MINOR 5

/* An opaque communicator: one rank's handle on the job. */
typedef struct sparcml_comm sparcml_comm;
/* An operation in flight, from a sparcml_start_* call. */
typedef struct sparcml_request sparcml_request;
/* The result of a sparse allreduce in sparse form (reusable). */
typedef struct sparcml_result sparcml_result;

/* Element types. */
typedef enum {
	SPARCML_FLOAT32 = 0,
	SPARCML_FLOAT64 = 1
} sparcml_dtype;

/* Reductions. SPARCML_AVG is the sum divided by the number of ranks. */
typedef enum {
	SPARCML_SUM = 0,
	SPARCML_AVG = 1,
	SPARCML_MIN = 2,
	SPARCML_MAX = 3
} sparcml_op;

/* Status codes. SPARCML_OK is 0; every error is positive. */
typedef enum {
	SPARCML_OK = 0,
	/* An argument is invalid on this rank: NULL pointer, unknown dtype or
	 * op, a count out of range, a root outside [0, size), unsorted or
	 * out-of-range sparse indices. */
	SPARCML_ERR_INVALID = 1,
	/* The ranks called different collectives at the same point, or the
	 * same one with different counts, dtypes, reductions or roots. */
	SPARCML_ERR_MISMATCH = 2,
	/* A peer died, closed its connection or sent malformed data. The
	 * communicator is unusable: abort or finalize it. */
	SPARCML_ERR_PEER_LOST = 3,
	/* The operation's deadline (SPARCML_TIMEOUT) passed. */
	SPARCML_ERR_TIMEOUT = 4,
	/* sparcml_abort was called here or on a peer, or another rank failed
	 * this operation (its reason is in the error text). */
	SPARCML_ERR_ABORTED = 5,
	/* The communicator was finalized. */
	SPARCML_ERR_CLOSED = 6,
	/* sparcml_init failed: environment, rendezvous or connection set-up. */
	SPARCML_ERR_INIT = 7,
	/* sparcml_wait's timeout passed before the operation completed; the
	 * operation continues and the request stays valid. */
	SPARCML_ERR_NOT_DONE = 8,
	/* Out of memory. */
	SPARCML_ERR_NOMEM = 9,
	/* A bug in sparcml: please report it with the error text. */
	SPARCML_ERR_INTERNAL = 10
} sparcml_status;

/* ---- Version and errors ------------------------------------------------ */

/* Stores the library's ABI version in *major and *minor (either may be
 * NULL). Compare *major with SPARCML_VERSION_MAJOR to detect a library
 * that does not match the header. */
int sparcml_version(int *major, int *minor);

/* The version of the build, as the start-up line and `sparcml version`
 * report it (for example "v0.4.0-12-gabc1234", or "(devel)" and the
 * commit for a build made without the Makefile). Never NULL; static
 * storage. Since ABI 0.3. */
const char *sparcml_build_version(void);

/* The text of the last error of a call made by this thread ("" if none),
 * for example "sparcml: rank 1: allreduce seq 4 (peer 2): rank 2 peer lost:
 * EOF". Never NULL. Valid until this thread's next failing call. */
const char *sparcml_last_error(void);

/* This thread's last error as fields. Strings point into thread-local
 * storage, valid until this thread's next failing call. */
typedef struct {
	int code;            /* a sparcml_status, SPARCML_OK if none yet */
	int rank;            /* this rank, -1 if unknown (failed init) */
	int peer;            /* the peer involved, -1 if none */
	uint64_t seq;        /* the operation's sequence number, 0 if none */
	const char *op;      /* the operation ("allreduce", "init", ...) */
	const char *message; /* the same text as sparcml_last_error() */
} sparcml_error_info;

/* Fills *info with this thread's last error. Returns SPARCML_ERR_INVALID
 * if info is NULL. */
int sparcml_last_error_info(sparcml_error_info *info);

/* A short name for a status code ("SPARCML_ERR_MISMATCH"); never NULL. */
const char *sparcml_status_name(int status);

/* ---- Communicators ----------------------------------------------------- */

/* Joins the job this process belongs to, as described by the launcher's
 * environment (rank, size, rendezvous address, token), and stores the
 * communicator in *comm. Collective: returns once every rank has joined,
 * or fails with SPARCML_ERR_INIT saying what was missing or unreachable
 * (bounded by SPARCML_INIT_TIMEOUT, 2 minutes unless set). */
int sparcml_init(sparcml_comm **comm);

/* sparcml_init with explicit values: rank and size (both -1 to take them
 * from the environment), the rendezvous address "host:port" of rank 0's
 * store and the job token shared by every rank (NULL to take them from the
 * environment, SPARCML_ADDR and SPARCML_TOKEN). Other settings still come
 * from the environment (SPARCML_TIMEOUT, SPARCML_TRANSPORT, ...). */
int sparcml_init_with(sparcml_comm **comm, int rank, int size,
		      const char *addr, const char *token);

/* Releases comm. Collective, like MPI_Finalize: it first waits (for at most
 * 30 seconds, or the default timeout when shorter) until every rank has
 * reached it, so a rank that finished early does not tear down connections
 * a slower rank still needs. Operations still pending then fail with
 * SPARCML_ERR_CLOSED; their requests must still be completed with
 * sparcml_wait or sparcml_test. comm is freed even on error; NULL is a
 * no-op. */
int sparcml_finalize(sparcml_comm *comm);

/* Fails every pending and later operation on this rank and drops the
 * connections, so every peer's pending and later operations fail too,
 * naming this rank; reason (may be NULL) is logged in the errors. For
 * tearing a job down on an unrecoverable error. comm must still be
 * released with sparcml_finalize. */
int sparcml_abort(sparcml_comm *comm, const char *reason);

/* This process's rank in [0, size), or -SPARCML_ERR_INVALID if comm is
 * NULL. Does not enter the runtime. */
int sparcml_rank(const sparcml_comm *comm);

/* The number of ranks in the job, or -SPARCML_ERR_INVALID if comm is NULL.
 * Does not enter the runtime. */
int sparcml_size(const sparcml_comm *comm);

/* Fails the next operation on every rank with reason, without running it:
 * takes the place of one collective in the start order, so the other
 * ranks' collective at that point fails at once (SPARCML_ERR_ABORTED,
 * naming this rank and reason) instead of waiting for its deadline.
 * For bindings that validate arguments themselves (a wrong array type in
 * Python). operation names the collective in the errors (may be NULL).
 * Returns SPARCML_ERR_INVALID, with reason as this thread's error text. */
int sparcml_fail(sparcml_comm *comm, const char *operation, const char *reason);

/* ---- Dense collectives (blocking) -------------------------------------- */

/* Reduces buf (count elements) element-wise across all ranks with op and
 * leaves the result in buf on every rank. */
int sparcml_allreduce(sparcml_comm *comm, void *buf, size_t count,
		      sparcml_dtype dtype, sparcml_op op);

/* Reduces sendbuf (size * recvcount elements: one block per rank) across
 * ranks with op and leaves block rank of the result in recvbuf (recvcount
 * elements), as NCCL's ncclReduceScatter. recvbuf may be block rank of
 * sendbuf (in place); it must not overlap sendbuf otherwise. */
int sparcml_reduce_scatter(sparcml_comm *comm, const void *sendbuf,
			   void *recvbuf, size_t recvcount,
			   sparcml_dtype dtype, sparcml_op op);

/* Concatenates every rank's sendbuf (sendcount elements, the same on
 * every rank) into recvbuf (size * sendcount elements) in rank order, on
 * every rank. sendbuf may be block rank of recvbuf (in place). */
int sparcml_allgather(sparcml_comm *comm, const void *sendbuf,
		      void *recvbuf, size_t sendcount, sparcml_dtype dtype);

/* Allgather with per-rank counts: rank r contributes recvcounts[r]
 * elements (recvcounts has size entries, the same on every rank, and
 * sendcount must equal recvcounts[rank]); recvbuf holds the blocks back to
 * back (the sum of recvcounts elements). */
int sparcml_allgatherv(sparcml_comm *comm, const void *sendbuf,
		       size_t sendcount, void *recvbuf,
		       const size_t *recvcounts, sparcml_dtype dtype);

/* Copies root's buf (count elements) into every other rank's buf. */
int sparcml_broadcast(sparcml_comm *comm, void *buf, size_t count,
		      sparcml_dtype dtype, int root);

/* Returns once every rank has entered the barrier. */
int sparcml_barrier(sparcml_comm *comm);

/* ---- Sparse allreduce (blocking) --------------------------------------- */

/* Sums every rank's sparse vector of dimension dim and writes the sum,
 * dense (dim elements), into dense_out on every rank. This rank's vector is
 * nnz entries: indices (strictly increasing, each below dim) and values
 * (nnz elements of dtype). Every rank must pass the same dim; each may
 * pass a different nnz, 0 included (indices and values may then be NULL).
 * Only stored entries travel (SparCML's algorithms, switching to dense
 * when that is smaller; the cost model chooses). dense_out must not
 * overlap indices or values. The reduction is always a sum. */
int sparcml_sparse_allreduce(sparcml_comm *comm, uint64_t dim, size_t nnz,
			     const uint32_t *indices, const void *values,
			     sparcml_dtype dtype, void *dense_out);

/* Creates an empty result for sparcml_sparse_allreduce_result. A result
 * keeps its memory between calls, so reusing one in a training loop does
 * not allocate in steady state. */
int sparcml_result_create(sparcml_result **result);

/* Releases result and its arrays. NULL is a no-op. */
void sparcml_result_free(sparcml_result *result);

/* sparcml_sparse_allreduce with the sum returned in result, sparse (sorted
 * unique indices, the union of the ranks', and their values) or dense (all
 * dim values), as the library chose: dense when that is smaller, or when
 * the cost model ran the dense allreduce of the densified vectors.
 * sparcml_result_is_dense says which. The result's arrays are valid until
 * result is used again or freed. */
int sparcml_sparse_allreduce_result(sparcml_comm *comm, uint64_t dim,
				    size_t nnz, const uint32_t *indices,
				    const void *values, sparcml_dtype dtype,
				    sparcml_result *result);

/* Accessors of a result filled by a completed sparse allreduce. They do
 * not enter the runtime and return 0 (NULL for pointers) if result is NULL. */
uint64_t sparcml_result_dim(const sparcml_result *result);
/* 1 if the result is dense (nnz == dim and no indices), else 0. */
int sparcml_result_is_dense(const sparcml_result *result);
/* The number of stored entries (dim when dense). */
size_t sparcml_result_nnz(const sparcml_result *result);
/* The nnz strictly increasing indices; NULL when dense or empty. */
const uint32_t *sparcml_result_indices(const sparcml_result *result);
/* The nnz values, of the input's dtype; NULL when empty. */
const void *sparcml_result_values(const sparcml_result *result);
/* The element type of the values (SPARCML_FLOAT32 before the first call). */
sparcml_dtype sparcml_result_dtype(const sparcml_result *result);
/* The values per index: the row width of a row-sparse result, 1 for an
 * element result. Since ABI 0.5. */
size_t sparcml_result_width(const sparcml_result *result);

/* ---- Row-sparse allreduce (ABI 0.5) ------------------------------------ */

/* Sums every rank's row-sparse matrix of rows rows of width values (an
 * embedding gradient): this rank's nrows rows are row_indices (strictly
 * increasing, each below rows) and values (nrows*width elements of dtype,
 * row after row). A row travels as one index and its width values, never
 * one index per value. Every rank must pass the same rows and width; each
 * may pass a different nrows, 0 included (both pointers may then be NULL).
 * The result is always row-sparse: sparcml_result_nnz rows, their indices
 * sorted, sparcml_result_nnz*width values. It holds every row some rank
 * passed, except that a range of the sum the library carried dense gives
 * back only its rows holding a nonzero value (so rows that summed to
 * exactly zero may be missing, and no untouched row is ever present). The
 * reduction is a sum. */
int sparcml_sparse_allreduce_rows(sparcml_comm *comm, uint64_t rows,
				  size_t width, size_t nrows,
				  const uint32_t *row_indices,
				  const void *values, sparcml_dtype dtype,
				  sparcml_result *result);
/* Starts sparcml_sparse_allreduce_rows (see the non-blocking section). */
int sparcml_start_sparse_allreduce_rows(sparcml_comm *comm, uint64_t rows,
					size_t width, size_t nrows,
					const uint32_t *row_indices,
					const void *values,
					sparcml_dtype dtype,
					sparcml_result *result,
					sparcml_request **req);

/* ---- Non-blocking collectives ------------------------------------------ */

/* Each sparcml_start_* starts the collective of the same name and returns
 * at once with a request in *req; the operation progresses on its own.
 * Complete the request with sparcml_wait or sparcml_test. Every buffer,
 * including recvcounts, must stay valid and untouched until then. Several
 * operations may be in flight on one communicator; they complete in any
 * order. On an immediate error (invalid argument) *req is set to NULL and
 * the error is returned; errors of the operation itself are returned by
 * the sparcml_wait or sparcml_test that completes it. */
int sparcml_start_allreduce(sparcml_comm *comm, void *buf, size_t count,
			    sparcml_dtype dtype, sparcml_op op,
			    sparcml_request **req);
int sparcml_start_reduce_scatter(sparcml_comm *comm, const void *sendbuf,
				 void *recvbuf, size_t recvcount,
				 sparcml_dtype dtype, sparcml_op op,
				 sparcml_request **req);
int sparcml_start_allgather(sparcml_comm *comm, const void *sendbuf,
			    void *recvbuf, size_t sendcount,
			    sparcml_dtype dtype, sparcml_request **req);
int sparcml_start_allgatherv(sparcml_comm *comm, const void *sendbuf,
			     size_t sendcount, void *recvbuf,
			     const size_t *recvcounts, sparcml_dtype dtype,
			     sparcml_request **req);
int sparcml_start_broadcast(sparcml_comm *comm, void *buf, size_t count,
			    sparcml_dtype dtype, int root,
			    sparcml_request **req);
int sparcml_start_barrier(sparcml_comm *comm, sparcml_request **req);
int sparcml_start_sparse_allreduce(sparcml_comm *comm, uint64_t dim,
				   size_t nnz, const uint32_t *indices,
				   const void *values, sparcml_dtype dtype,
				   void *dense_out, sparcml_request **req);
/* result is filled when the request completes and must not be used (nor
 * freed) until then. */
int sparcml_start_sparse_allreduce_result(sparcml_comm *comm, uint64_t dim,
					  size_t nnz, const uint32_t *indices,
					  const void *values,
					  sparcml_dtype dtype,
					  sparcml_result *result,
					  sparcml_request **req);

/* Waits until the operation of *req completes, for at most timeout_seconds
 * (negative: no limit but the operation's own deadline; 0: just look).
 * On completion it releases the request, sets *req to NULL and returns the
 * operation's status (SPARCML_OK or its error). If the timeout passes
 * first it returns SPARCML_ERR_NOT_DONE and leaves *req valid: the
 * operation continues, and its buffers stay in use. */
int sparcml_wait(sparcml_request **req, double timeout_seconds);

/* Reports in *done whether the operation of *req has completed. If it has,
 * it releases the request, sets *req to NULL and returns the operation's
 * status; otherwise it returns SPARCML_OK with *done = 0. */
int sparcml_test(sparcml_request **req, int *done);

/* ---- Gradient compression ---------------------------------------------- */

/* A gradient compressor: the state of one gradient buffer of fixed length
 * (a layer, or a DDP bucket) reduced sparsely step after step. Each
 * sparcml_compressor_reduce adds the gradient into the error-feedback
 * residual, selects the entries to send (the largest magnitudes, density
 * of them), sums every rank's selection with the sparse allreduce and
 * writes the average (the sum divided by the number of ranks, zero where
 * no rank sent anything) back into the gradient's buffer. What was not
 * sent stays in the residual, added to the next step's gradient, so that
 * nothing is lost, only delayed (error feedback).
 *
 * Memory: the residual is one element per gradient element (count
 * elements of dtype, 4 bytes each for float32), kept for the compressor's
 * life; the selection and the sum take about density * count * 8 bytes
 * more (indices and values), reused from step to step.
 *
 * A compressor belongs to its communicator: destroy it before finalizing
 * the communicator. One compressor's calls must not run concurrently;
 * different compressors' reductions follow the start-order rule of every
 * collective. */
typedef struct sparcml_compressor sparcml_compressor;

/* How the selected values travel (the indices are exact). FP16 and BF16
 * round to within 2^-11 and 2^-8 of each value; Q8, Q4 and Q2 are
 * QSGD-style stochastic encodings with one scale per bucket of values,
 * unbiased (docs/QUANTIZATION.md). The encoding's error is not fed back
 * into the residual. */
typedef enum {
	SPARCML_QUANT_NONE = 0,
	SPARCML_QUANT_FP16 = 1,
	SPARCML_QUANT_BF16 = 2,
	SPARCML_QUANT_Q8 = 3,
	SPARCML_QUANT_Q4 = 4,
	SPARCML_QUANT_Q2 = 5
} sparcml_quant;

/* How the entries to send are chosen (docs/COMPRESSION.md). */
typedef enum {
	/* The exact top-k by magnitude, ties to the lower index. */
	SPARCML_SELECT_EXACT = 0,
	/* A threshold estimated from a sample, as Deep Gradient Compression
	 * does: about k entries in one pass. */
	SPARCML_SELECT_SAMPLED = 1,
	/* The exact threshold, recomputed every 32 steps (Ok-Topk). */
	SPARCML_SELECT_REUSE = 2,
	/* k entries at random, the same on every rank. */
	SPARCML_SELECT_RANDOM = 3
} sparcml_select;

/* What a reduction keeps of the ranks' selections (docs/COMPRESSION.md).
 * Since ABI 0.4. */
typedef enum {
	/* The exact sum of every rank's selection: up to size * k entries. */
	SPARCML_SCOPE_UNION = 0,
	/* About k of those sums, the largest in magnitude over every rank
	 * (Ok-Topk's global top-k): about 2k entries sent per rank whatever
	 * the number of ranks; what a rank selected and the global selection
	 * dropped goes back into its residual. Lossy on top of the local
	 * selection: never chosen automatically. */
	SPARCML_SCOPE_GLOBAL = 1
} sparcml_scope;

/* Creates in *comp a compressor for gradients of count elements of dtype
 * on comm, sending ceil(density * count) entries per step (density in
 * (0, 1]), their values encoded by quant, with error feedback unless
 * error_feedback is 0, chosen by method. Its residual starts at zero.
 * Collective: every rank must create its compressors in the same order,
 * with the same arguments; a rank whose arguments are invalid gets
 * SPARCML_ERR_INVALID and the others SPARCML_ERR_ABORTED, and ranks whose
 * arguments differ all get SPARCML_ERR_MISMATCH (naming the argument); on
 * any error *comp is NULL. count is at most 2^32. */
int sparcml_compressor_create(sparcml_comm *comm, size_t count,
			      sparcml_dtype dtype, double density,
			      sparcml_quant quant, int error_feedback,
			      sparcml_select method, sparcml_compressor **comp);

/* sparcml_compressor_create with the scope of its reductions: with
 * SPARCML_SCOPE_UNION it is sparcml_compressor_create; with
 * SPARCML_SCOPE_GLOBAL each sparcml_compressor_reduce keeps about
 * ceil(density * count) entries in all (their operation is named
 * "global-topk" in errors). Every rank must pass the same scope (checked
 * like the other arguments). Since ABI 0.4. */
int sparcml_compressor_create_scoped(sparcml_comm *comm, size_t count,
				     sparcml_dtype dtype, double density,
				     sparcml_quant quant, int error_feedback,
				     sparcml_select method, sparcml_scope scope,
				     sparcml_compressor **comp);

/* Reduces this rank's gradient buf (count elements, the compressor's
 * count and dtype) in place: on return buf holds the average over every
 * rank of their selected entries. Collective, matched by start order like
 * every collective (its operation is named "sparse-allreduce" in errors).
 * A NULL buf or a count other than the compressor's fails the reduction
 * on every rank (SPARCML_ERR_INVALID here, SPARCML_ERR_ABORTED on the
 * others). If the reduction fails once it has started, with error
 * feedback buf is left at zero and the whole gradient is in the
 * residual, so a later step still sends it: do not apply buf, and do not
 * reduce the same gradient again. */
int sparcml_compressor_reduce(sparcml_compressor *comp, void *buf,
			      size_t count);

/* Copies the error-feedback residual (what was accumulated and not yet
 * sent; zeros without error feedback) into out, count elements of the
 * compressor's dtype and count. Local: does not communicate. For
 * checkpoints and inspection. */
int sparcml_compressor_residual(const sparcml_compressor *comp, void *out,
				size_t count);

/* Releases comp and its residual. Local. NULL is a no-op. */
int sparcml_compressor_destroy(sparcml_compressor *comp);

/* Starts sparcml_compressor_reduce(comp, buf, count) and returns at once:
 * the selection runs here, the reduction in the background. buf must not
 * be touched until sparcml_wait or sparcml_test completes *req; it then
 * holds the average. One reduction per compressor is in flight: a second
 * start waits for the first. Since ABI 0.4. */
int sparcml_compressor_start(sparcml_compressor *comp, void *buf,
			     size_t count, sparcml_request **req);

/* ---- Point to point, sub-communicators, deadlines (since ABI 0.4) ----
 *
 * sparcml_start_send sends count elements of buf to peer, which receives
 * them with sparcml_start_recv of the same count and dtype. Messages
 * between two ranks match in the order they were started; ranks not
 * involved call nothing. buf must not be touched until the request
 * completes. A peer that is not another rank of comm fails here only. */
int sparcml_start_send(sparcml_comm *comm, const void *buf, size_t count,
		       sparcml_dtype dtype, int peer, sparcml_request **req);
int sparcml_start_recv(sparcml_comm *comm, void *buf, size_t count,
		       sparcml_dtype dtype, int peer, sparcml_request **req);

/* Partitions comm as MPI_Comm_split: collective over comm. The ranks that
 * pass the same color form one communicator, ranked by key, then by their
 * rank in comm; *newcomm is NULL on a rank passing a negative color. The
 * new communicator shares comm's connections and keeps its deadline;
 * finalize it (not collective for a split one's connections, which comm
 * owns) before comm. */
int sparcml_comm_split(sparcml_comm *comm, int color, int key,
		       sparcml_comm **newcomm);

/* Sets the deadline of each operation comm starts from now on: seconds
 * after its start (> 0), or the library's default (SPARCML_TIMEOUT) when
 * 0 or negative. Local. An operation past its deadline fails with
 * SPARCML_ERR_TIMEOUT on every rank. */
int sparcml_set_timeout(sparcml_comm *comm, double seconds);

#ifdef __cplusplus
}
#endif

#endif /* SPARCML_H */
