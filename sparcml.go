// Package sparcml is a communication runtime for distributed machine
// learning that exploits sparsity: dense collectives (allreduce,
// reduce-scatter, allgather(v), broadcast, barrier) with bandwidth-optimal
// algorithms, and sparse collectives in the style of SparCML, over TCP or
// RDMA.
//
// A job is N processes (ranks). Each calls Init, which reads its rank, the
// job size and the rendezvous address from the environment of the launcher
// that started it (sparcml run, torchrun, mpirun, srun) or from options,
// meets the others through a small key-value store served by rank 0, and
// connects a transport. Collectives are generic functions over []float32
// and []float64 that take the communicator:
//
//	comm, err := sparcml.Init(ctx)
//	...
//	err = sparcml.Allreduce(ctx, comm, grads, sparcml.Sum)
//
// Every collective has a Start form returning a Request, so several
// operations can be in flight on one communicator. Operations must be
// started in the same order on every rank; a rank that starts a different
// collective, or the same one with different lengths, gets an error naming
// the mismatch instead of a wrong result or a hang. Every operation is
// bounded by its context and by the communicator's default timeout
// (SPARCML_TIMEOUT); when a peer dies, every pending and later operation on
// every surviving rank fails with an error naming it.
package sparcml

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparcml/sparcml/bootstrap"
	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport"
)

// Float is the element type of the collectives.
type Float = collectives.Float

// ReduceOp is the reduction of Allreduce and ReduceScatter.
type ReduceOp = collectives.ReduceOp

// Reductions.
const (
	Sum = collectives.Sum
	Min = collectives.Min
	Max = collectives.Max
)

// Algo names a collective algorithm; AlgoAuto lets the cost model choose.
type Algo = collectives.Algo

// Algorithms that can be forced with WithAlgo.
const (
	AlgoAuto              = collectives.AlgoAuto
	AlgoRing              = collectives.AlgoRing
	AlgoRabenseifner      = collectives.AlgoRabenseifner
	AlgoRecursiveDoubling = collectives.AlgoRecursiveDoubling
)

// Error is the error every collective returns: rank, peer, operation,
// sequence number and cause. Use errors.Is with ErrPeerLost, ErrMismatch,
// ErrAborted or context.DeadlineExceeded to classify it.
type Error = transport.Error

// Sentinel errors.
var (
	ErrPeerLost = transport.ErrPeerLost
	ErrMismatch = transport.ErrMismatch
	ErrAborted  = transport.ErrAborted
	ErrClosed   = transport.ErrClosed
	ErrInvalid  = transport.ErrInvalid
)

// Comm is a communicator: one rank's handle on the job. Its methods and the
// collective functions are safe for concurrent use, but operations must be
// started in the same order on every rank.
type Comm struct {
	t       transport.Transport
	id      uint32
	timeout time.Duration
	pool    *collectives.Buffers
	model   collectives.CostModel
	store   bootstrap.Store
	logf    func(format string, args ...any)

	seqMu sync.Mutex
	seq   uint64

	inflightMu sync.Mutex
	inflight   map[uint64]struct{} // collectives started and not finished

	p2pMu  sync.Mutex
	p2pSeq map[p2pKey]uint64

	deadlines sharedDeadlines // the default timeout's contexts (deadline.go)

	closed atomic.Bool
}

// Rank is this process's rank in [0, Size()).
func (c *Comm) Rank() int { return c.t.Rank() }

// Size is the number of ranks in the job.
func (c *Comm) Size() int { return c.t.Size() }

// Transport is the name of the transport in use ("tcp", "rdma", "inmem").
func (c *Comm) Transport() string { return c.t.Name() }

// Stats returns the transport's byte and message counters.
func (c *Comm) Stats() transport.Stats { return c.t.Stats() }

// Timeout is the default deadline applied to every operation (0: none).
func (c *Comm) Timeout() time.Duration { return c.timeout }

// CostModel returns the alpha-beta model used to choose algorithms.
func (c *Comm) CostModel() collectives.CostModel { return c.model }

// Abort fails every pending and later operation on this rank with err and
// drops the connections, so every peer's pending and later operations fail
// too, naming this rank. Use it to tear a job down on an unrecoverable
// error.
func (c *Comm) Abort(err error) {
	if err == nil {
		err = errors.New("aborted by the application")
	}
	c.t.Abort(err)
}

// Close releases the communicator. For a communicator made by Init it is
// collective, like MPI_Finalize: it first waits, for at most
// closeQuiesce (or the default timeout when shorter), until every rank
// has reached Close, so a rank that finished early does not tear down
// connections a slower rank still needs for its last operation. Pending
// operations then fail with ErrClosed.
func (c *Comm) Close() error {
	if c.closed.Load() {
		return nil
	}
	if c.store != nil && c.Size() > 1 && c.t.Err() == nil {
		wait := closeQuiesce
		if c.timeout > 0 && c.timeout < wait {
			wait = c.timeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_ = c.Barrier(ctx) // best effort: a dead or absent rank only delays Close
		cancel()
	}
	if c.closed.Swap(true) {
		return nil
	}
	err := c.t.Close()
	c.deadlines.cancelAll()
	if c.store != nil {
		if serr := c.store.Close(); err == nil {
			err = serr
		}
	}
	return err
}

// closeQuiesce bounds how long Close waits for the other ranks.
const closeQuiesce = 30 * time.Second

// nextOp assigns the next sequence number and returns the op with its
// context bounded by the default timeout, and what to call when it ends.
func (c *Comm) nextOp(ctx context.Context) (*collectives.Op, context.CancelFunc) {
	c.seqMu.Lock()
	c.seq++
	seq := c.seq
	c.seqMu.Unlock()
	ctx, release := c.bounded(ctx)
	return &collectives.Op{Ctx: ctx, T: c.t, Comm: c.id, Seq: seq, Pool: c.pool}, release
}

// bounded returns ctx, bounded by the default timeout if it has no
// deadline of its own, and what to call when the operation ends.
func (c *Comm) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, has := ctx.Deadline(); has || c.timeout <= 0 {
		return ctx, noRelease
	}
	return c.deadlines.bound(ctx, c.timeout)
}

// newComm wraps a connected transport.
func newComm(t transport.Transport, timeout time.Duration, logf func(string, ...any)) *Comm {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Comm{t: t, id: 1, timeout: timeout, pool: &collectives.Buffers{},
		model: collectives.DefaultCostModel, logf: logf}
}

// NewComm makes a communicator over an already connected transport, for
// embedding sparcml in a runtime that sets up its own connections (and for
// tests over transport.NewInMemory).
func NewComm(t transport.Transport, opts ...Option) *Comm {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	c := newComm(t, cfg.timeout, cfg.logf)
	return c
}

// Local starts a job of size ranks inside this process, connected by the
// in-memory transport: useful for examples, tests and single-process
// experiments. Close every communicator when done.
func Local(size int, opts ...Option) ([]*Comm, error) {
	if size < 1 {
		return nil, fmt.Errorf("%w: job size %d < 1", ErrInvalid, size)
	}
	ts := transport.NewInMemory(size)
	comms := make([]*Comm, size)
	for r, t := range ts {
		comms[r] = NewComm(t, opts...)
	}
	return comms, nil
}

// defaultLogger logs to stderr with a rank prefix unless SPARCML_LOG=off.
func defaultLogger(level string) func(string, ...any) {
	if level == "off" || level == "none" || level == "quiet" {
		return func(string, ...any) {}
	}
	var w io.Writer = os.Stderr
	l := log.New(w, "sparcml: ", 0)
	return func(format string, args ...any) { l.Printf(format, args...) }
}
