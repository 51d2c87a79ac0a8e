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
//
// The library logs to stderr as NCCL does: SPARCML_DEBUG chooses how much
// (NONE, VERSION, WARN, INFO, TRACE; default WARN: rank 0's start-up line
// and warnings), SPARCML_DEBUG_SUBSYS which subsystems, and WithLogger
// where to. Every SPARCML_* variable is listed, with its default, in
// docs/CONFIGURATION.md.
//
// # The API
//
//   - Comm, one rank's handle on the job: Init (a process of a launched
//     job), Local (every rank inside one process) or NewComm (over a
//     transport connected by the caller); its methods say where the ranks
//     run (Rank, Size, Host, LocalRanks, Transport) and make, repair and
//     end communicators (Split, Shrink, Revoke, FailedRanks, Abort, Close).
//   - The operations: Allreduce, ReduceScatter, Allgather, Allgatherv,
//     Broadcast, Comm.Barrier, Send and Recv, SparseAllreduce and
//     SparseAllgather; each has a Start form returning a Request (Wait,
//     Test, Done; WaitAll).
//   - Options: an Option adjusts Init, Local or NewComm (WithRank,
//     WithAddr, WithTransport, WithTimeout, WithLogger, ...); a CallOption
//     one operation (WithAlgo, WithQuant, WithTensor, ...).
//   - Errors: every operation's error is an Error (rank, peer, operation,
//     sequence number, cause); errors.Is classifies it with ErrPeerLost,
//     ErrMismatch, ErrAborted, ErrClosed, ErrInvalid or ErrRevoked.
//   - SparseVector, the vectors of the sparse collectives.
//   - Compressor: top-k gradient sparsification with error feedback,
//     reduced with SparseAllreduce.
//
// Besides this package, users import transport (the contract a transport
// given to NewComm implements; transport/transporttest is its conformance
// suite) and compress (gradient selection without communication, and the
// configuration a Compressor takes). docs/ARCHITECTURE.md maps the rest.
package sparcml

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/deadline"
	"github.com/sparcml/sparcml/internal/flight"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/internal/sparseplan"
	"github.com/sparcml/sparcml/internal/topology"
	"github.com/sparcml/sparcml/internal/world"
	"github.com/sparcml/sparcml/transport"
)

// Float is the element type of the collectives.
type Float = collectives.Float

// ReduceOp is the reduction of Allreduce and ReduceScatter.
type ReduceOp = collectives.ReduceOp

// Reductions. Avg is Sum divided by the number of ranks (NCCL's ncclAvg).
const (
	Sum = collectives.Sum
	Min = collectives.Min
	Max = collectives.Max
	Avg = collectives.Avg
)

// Algo names a collective algorithm; AlgoAuto lets the cost model choose.
type Algo = collectives.Algo

// Algorithms that can be forced with WithAlgo.
const (
	AlgoAuto              = collectives.AlgoAuto
	AlgoRing              = collectives.AlgoRing
	AlgoRabenseifner      = collectives.AlgoRabenseifner
	AlgoRecursiveDoubling = collectives.AlgoRecursiveDoubling
	// AlgoHierarchical follows the hosts the ranks run on (Comm.Host):
	// within each host, then across hosts once per host, then within
	// again (docs/ALGORITHMS.md). Allreduce, ReduceScatter, Allgather,
	// Broadcast and SparseAllreduce take it; it needs the same number of
	// ranks on every host. AlgoAuto picks it for a dense allreduce when the
	// calibration measured the link within a host and the model finds it
	// faster.
	AlgoHierarchical = collectives.AlgoHierarchical
)

// Error is the error every collective returns: rank, peer, operation,
// sequence number and cause. Use errors.Is with ErrPeerLost, ErrMismatch,
// ErrAborted or context.DeadlineExceeded to classify it. A failure
// another rank detected matches ErrAborted and the sentinel of the code it
// sent (a peer's mismatch is ErrMismatch here too).
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
	log     *logging.Logger
	topo    topology.Topology // the host of every rank

	// sys is the library's own communicator over the same transport,
	// with its own sequence numbers, for start-up calibration and the
	// barrier of Close: the user's operations are numbered from 1 as
	// the user started them. nil on sys itself.
	sys *Comm

	seqMu sync.Mutex
	seq   uint64

	inflightMu sync.Mutex
	inflight   map[uint64]struct{} // collectives started and not finished

	p2pMu  sync.Mutex
	p2pSeq map[p2pKey]uint64

	deadlines deadline.Shared // the default timeout's contexts

	plans sparseplan.Plans // the sparse allreduces' decisions, for reuse

	// world is the state shared by every communicator over the job's
	// transport; members maps this communicator's ranks to the
	// transport's, nil for the job's own communicator.
	world   *world.World
	members world.Members
	rev     world.Revocation // Revoke and lost peers (revoke.go)

	diag *flight.Watch // flight recorder and stall watchdog (trace.go); nil on sys

	closed atomic.Bool
}

// Rank is this process's rank in [0, Size()).
func (c *Comm) Rank() int { return c.t.Rank() }

// Size is the number of ranks in the job.
func (c *Comm) Size() int { return c.t.Size() }

// Transport is the name of the transport in use ("tcp", "rdma", "shm",
// "inmem"), or of the transports joined by "+" when peers are reached
// through several ("shm+tcp": shared memory within the host, TCP to the
// other hosts; TransportOf says which reaches a peer).
func (c *Comm) Transport() string { return c.t.Name() }

// TransportOf names the transport that reaches peer ("" for this rank or
// a rank out of range).
func (c *Comm) TransportOf(peer int) string {
	if peer < 0 || peer >= c.Size() || peer == c.Rank() {
		return ""
	}
	if rt, ok := c.t.(*transport.Route); ok {
		return rt.Via(peer).Name()
	}
	return c.t.Name()
}

// Stats returns the transport's byte and message counters, the start-up
// measurement of the cost model included; for several transports, their
// sum (StatsByTransport has each one's).
func (c *Comm) Stats() transport.Stats { return c.t.Stats() }

// StatsByTransport returns the counters of each transport in use, by
// name: which carried what.
func (c *Comm) StatsByTransport() map[string]transport.Stats {
	parts := []transport.Transport{c.t}
	if rt, ok := c.t.(*transport.Route); ok {
		parts = rt.Parts()
	}
	m := make(map[string]transport.Stats, len(parts))
	for _, t := range parts {
		m[t.Name()] = t.Stats()
	}
	return m
}

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
// collective, like MPI_Finalize: it first waits, for at most 30 seconds
// (or the default timeout when shorter), until every rank has reached
// Close, so a rank that finished early does not tear down connections a
// slower rank still needs for its last operation. Pending operations then
// fail with ErrClosed.
func (c *Comm) Close() error {
	if c.closed.Load() {
		return nil
	}
	// After a timed-out operation (the transport is still up), or one that
	// failed for another rank's loss, the other ranks may never reach
	// Close: do not wait for them, and tell them why this rank goes
	// (internal/flight). Not where the survivors go on (per-peer model), nor for a
	// derived communicator, whose transport is the job's.
	stuck := c.diag.StuckErr()
	mayFail := c.members == nil && !c.world.Survives()
	if !mayFail {
		stuck = nil
	}
	if c.store != nil && c.Size() > 1 && c.t.Err() == nil && stuck == nil {
		wait := closeQuiesce
		if c.timeout > 0 && c.timeout < wait {
			wait = c.timeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		// Best effort: a dead or absent rank only delays Close; one lost
		// meanwhile is a cause the peers must hear of, as after an
		// operation.
		if err := c.sys.Barrier(ctx); err != nil && flight.LostElsewhere(err) && mayFail {
			stuck = err
		}
		cancel()
	}
	if c.closed.Swap(true) {
		return nil
	}
	c.diag.Stop()
	if stuck != nil {
		c.failBeforeClose(stuck)
		if c.store != nil {
			bootstrap.ShortenClose(c.store)
		}
	}
	err := c.t.Close()
	c.deadlines.CancelAll()
	c.sys.deadlines.CancelAll()
	c.world.Unregister(c.id, (*member)(c))
	if c.members != nil {
		world.StopWatching(c.t, c.id)
	}
	if c.store != nil {
		if serr := c.store.Close(); err == nil {
			err = serr
		}
	}
	return err
}

// failBeforeClose makes the transport fail with err on this rank alone,
// where it can, so that its goodbyes at Close carry err to the peers; a
// transport that cannot (RDMA) aborts, and the peers see this rank lost,
// with err where the transport's goodbye of an abort carries it.
func (c *Comm) failBeforeClose(err error) {
	err = closeCause(err)
	if failLocal := c.t.Caps().FailLocal; failLocal != nil {
		failLocal(err)
		return
	}
	c.t.Abort(err)
}

// closeCause is what this rank's goodbye tells the peers of err: the
// cause, without this rank's "sparcml: rank R: op seq S" prefix, which
// each peer's own error adds for itself (one prefix per error); a stall
// report stays.
func closeCause(err error) error {
	var te *transport.Error
	if !errors.As(err, &te) {
		return err
	}
	var se *flight.StallError
	if errors.As(err, &se) {
		return fmt.Errorf("%w; %s", te.Err, se.Report())
	}
	return te.Err
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
	locked := transport.LockedThread(ctx)
	ctx, release := c.bounded(ctx)
	if locked && !transport.LockedThread(ctx) { // a shared deadline carries no values
		ctx = transport.OnLockedThread(ctx)
	}
	return &collectives.Op{Ctx: ctx, T: c.t, Comm: c.id, Seq: seq, Pool: c.pool, Topo: c.collTopology()}, release
}

// bounded returns ctx, bounded by the default timeout if it has no
// deadline of its own, and what to call when the operation ends.
func (c *Comm) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, has := ctx.Deadline(); has || c.timeout <= 0 {
		return ctx, deadline.NoRelease
	}
	return c.deadlines.Bound(ctx, c.timeout)
}

// newComm wraps a connected transport; log is already tagged with the
// rank.
func newComm(t transport.Transport, timeout time.Duration, log *logging.Logger) *Comm {
	c := &Comm{t: t, id: world.UserCommID, timeout: timeout, pool: &collectives.Buffers{},
		model: collectives.DefaultCostModel, log: log, topo: topology.OneHost(t.Size())}
	c.sys = &Comm{t: t, id: world.UserCommID | world.SysCommBit, timeout: timeout, pool: c.pool,
		model: collectives.DefaultCostModel, topo: c.topo}
	c.world = world.New(t)
	c.sys.world = c.world
	c.world.Register(c.id, (*member)(c))
	c.watchRevoke()
	return c
}

// NewComm makes a communicator over an already connected transport, for
// embedding sparcml in a runtime that sets up its own connections (and for
// tests over transport.NewInMemory). Of the environment it uses only the
// log's variables (SPARCML_DEBUG, SPARCML_DEBUG_SUBSYS), the flight
// recorder's (SPARCML_FLIGHT_OPS, SPARCML_DUMP_DIR) and
// SPARCML_SPARSE_AGREE_EVERY; the timeout is WithTimeout's alone. If any
// SPARCML_* variable is invalid it logs the error as a warning and uses
// the defaults (Local returns that error instead).
func NewComm(t transport.Transport, opts ...Option) *Comm {
	s, err := config.Load(os.Getenv)
	if err != nil {
		s, _ = config.Load(func(string) string { return "" })
	}
	c := newCommOptions(t, newOptions(opts), s)
	if err != nil {
		c.log.Warnf(logging.Env, "%v; using the defaults", err)
	}
	return c
}

func newCommOptions(t transport.Transport, o options, s *config.Settings) *Comm {
	c := newComm(t, o.Timeout, newLogger(o, s).WithRank(t.Rank()))
	c.plans.Every = s.SparseAgreeEvery
	c.startDiag(s, nil)
	return c
}

// Local starts a job of size ranks inside this process, connected by the
// in-memory transport: useful for examples, tests and single-process
// experiments. Of the environment it uses only the variables NewComm
// uses and SPARCML_ON_PEER_LOSS (unless WithOnPeerLoss is given), and it
// fails if any SPARCML_* variable is invalid. Close every communicator
// when done.
func Local(size int, opts ...Option) ([]*Comm, error) {
	if size < 1 {
		return nil, fmt.Errorf("sparcml: %w: job size %d < 1", ErrInvalid, size)
	}
	s, err := config.Load(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("sparcml: %w", err)
	}
	o := newOptions(opts)
	ts := transport.NewInMemory(size)
	comms := make([]*Comm, size)
	for r, t := range ts {
		comms[r] = newCommOptions(t, o, s)
		if err := comms[r].setPeerLoss(o, s); err != nil {
			return nil, err
		}
	}
	return comms, nil
}
