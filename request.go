package sparcml

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport"
)

// Request is a collective started with one of the Start functions. It
// completes on its own (progress does not depend on Wait being called);
// Wait, Test and Done observe it.
type Request struct {
	seq  uint64
	kind string
	done <-chan struct{}
	err  error
	algo Algo

	// A collective runs in whichever goroutine claims it first: the one
	// start launched, or a Wait that comes before that goroutine ran
	// (see Wait).
	run     func()
	claimed atomic.Bool

	sparse *SparseStats

	// Point-to-point requests are the transport's own request tr (done
	// is nil: Done asks tr); finishP2P computes err once it has
	// completed, once guards it.
	tr   *transport.Request
	p2p  p2pState
	once sync.Once
}

// result is the operation's error once done is closed.
func (r *Request) result() error {
	if r.tr != nil {
		r.once.Do(func() { r.err = r.finishP2P() })
	}
	return r.err
}

// Wait blocks until the operation completes or ctx ends, and returns the
// operation's error. A ctx ending here stops the waiting, not the
// operation: to cancel the operation on every rank, cancel the context it
// was started with.
//
// A Wait with a ctx that never ends (context.Background) on a collective
// whose goroutine has not begun yet runs the collective itself, as the
// blocking call does: a caller from C, locked to its thread, then blocks
// once instead of handing its processor to the collective's goroutine and
// being woken by it (the "async_op wait" row of
// python/tools/call_bench.py).
func (r *Request) Wait(ctx context.Context) error {
	if ctx.Done() == nil && r.claim() {
		return r.result()
	}
	if r.tr != nil {
		// The transport's Wait, so that a transport that progresses in
		// the waiting goroutine (TCP's reading, RDMA's polling) can.
		if err := r.tr.Wait(ctx); err != nil {
			if done, _ := r.tr.Test(); !done {
				return fmt.Errorf("sparcml: waiting for %s seq %d: %w", r.kind, r.seq, ctx.Err())
			}
		}
		return r.result()
	}
	select {
	case <-r.done:
		return r.result()
	case <-ctx.Done():
		return fmt.Errorf("sparcml: waiting for %s seq %d: %w", r.kind, r.seq, ctx.Err())
	}
}

// WaitAll waits for every request (as MPI_Waitall) and returns their
// errors joined, nil if all succeeded; a nil request is skipped. It waits
// for the last one first: messages between two ranks complete in the order
// they were started, so by the time the last of a window of receives has
// completed the others usually have too, and the caller is woken once for
// the window instead of once per message (on a busy machine each wake-up
// of a sleeping goroutine can cost more than a small message's transfer).
// A ctx ending stops the waiting, not the operations, as in Wait.
func WaitAll(ctx context.Context, reqs ...*Request) error {
	var errs []error
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i] == nil {
			continue
		}
		if err := reqs[i].Wait(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	slices.Reverse(errs) // in the order the requests were given
	return errors.Join(errs...)
}

// Test reports whether the operation has completed, and its error if so.
func (r *Request) Test() (bool, error) {
	select {
	case <-r.Done():
		return true, r.result()
	default:
		return false, nil
	}
}

// Done is closed when the operation completes.
func (r *Request) Done() <-chan struct{} {
	if r.tr != nil {
		// Asked each time: the transport learns that someone watches
		// the channel rather than waiting (see transport.Request.Done).
		return r.tr.Done()
	}
	return r.done
}

// Seq is the operation's sequence number on its communicator.
func (r *Request) Seq() uint64 { return r.seq }

// Algo is the algorithm the operation ran (valid once complete).
func (r *Request) Algo() Algo {
	<-r.Done()
	return r.algo
}

// SparseStats returns the statistics of a sparse allreduce once it has
// completed (nil for other operations).
func (r *Request) SparseStats() *SparseStats {
	<-r.Done()
	return r.sparse
}

// CallOption adjusts one collective call.
type CallOption func(*callConfig)

type callConfig struct {
	algo        Algo
	balanced    bool
	denseOut    bool
	quant       Quant
	quantBucket int
	indices     IndexWire
	tensor      uint64 // WithTensor's id
	tagged      bool   // WithTensor was given
	agreeEvery  int    // WithTensor's interval; 0: the communicator's, -1: invalid
}

// WithAlgo forces an algorithm instead of the cost model's choice. Every
// rank must force the same one.
func WithAlgo(a Algo) CallOption { return func(c *callConfig) { c.algo = a } }

// opFunc runs one collective over op and returns the algorithm used.
type opFunc func(op *collectives.Op, cc callConfig) (Algo, error)

func (c *Comm) callConfig(opts []CallOption) callConfig {
	var cc callConfig
	for _, o := range opts {
		o(&cc)
	}
	return cc
}

// run executes a collective in the caller's goroutine.
func (c *Comm) run(ctx context.Context, kind string, fn opFunc, opts []CallOption) error {
	if err := c.usable(kind); err != nil {
		return err
	}
	op, release := c.nextOp(ctx)
	defer release()
	c.track(op.Seq)
	_, err := c.traced(kind, fn)(op, c.callConfig(opts))
	c.untrack(op.Seq, err)
	return err
}

// start executes a collective in its own goroutine. The sequence number is
// taken here, synchronously, so start order defines matching order.
func (c *Comm) start(ctx context.Context, kind string, fn opFunc, opts []CallOption) *Request {
	if err := c.usable(kind); err != nil {
		return failedRequest(kind, err)
	}
	done := make(chan struct{})
	r := &Request{kind: kind, done: done}
	op, release := c.nextOp(ctx)
	r.seq = op.Seq
	cc := c.callConfig(opts)
	c.track(op.Seq)
	r.run = func() {
		defer release()
		r.algo, r.err = c.traced(kind, fn)(op, cc)
		c.untrack(op.Seq, r.err)
		close(done)
	}
	go r.claim()
	return r
}

// claim runs the collective in the calling goroutine unless another has
// claimed it; it reports whether this one did.
func (r *Request) claim() bool {
	if r.run == nil || !r.claimed.CompareAndSwap(false, true) {
		return false
	}
	r.run()
	return true
}

// failedRequest is a request that failed before it started.
func failedRequest(kind string, err error) *Request {
	done := make(chan struct{})
	close(done)
	return &Request{kind: kind, done: done, err: err}
}

// track records an operation in flight.
func (c *Comm) track(seq uint64) {
	c.inflightMu.Lock()
	defer c.inflightMu.Unlock()
	if c.inflight == nil {
		c.inflight = make(map[uint64]struct{})
	}
	c.inflight[seq] = struct{}{}
}

// untrack removes a finished operation. A mismatch means the ranks started
// operations in different orders, so the other operations in flight may
// be waiting for messages that will never come (a rank is running another
// collective at that sequence number): they are failed on every rank too,
// instead of waiting for their deadline, by the rank that detected it
// (a mismatch another rank told this one of is that rank's to handle).
func (c *Comm) untrack(seq uint64, err error) {
	c.inflightMu.Lock()
	delete(c.inflight, seq)
	var others []uint64
	var remote *transport.RemoteFailure
	if errors.Is(err, ErrMismatch) && !errors.As(err, &remote) {
		for s := range c.inflight {
			others = append(others, s)
		}
	}
	c.inflightMu.Unlock()
	for _, s := range others {
		c.t.FailOp(c.id, s, fmt.Errorf("%w: abandoned: operation %d mismatched across ranks, so operations were started in a different order on some ranks: %v",
			ErrMismatch, seq, closeCause(err)))
	}
}

func (c *Comm) usable(kind string) error {
	if c == nil {
		return fmt.Errorf("sparcml: %s: %w: nil communicator", kind, ErrInvalid)
	}
	if c.closed.Load() {
		return fmt.Errorf("sparcml: rank %d: %s: %w", c.Rank(), kind, transport.ErrClosed)
	}
	if err := c.rev.Err(); err != nil {
		return fmt.Errorf("sparcml: rank %d: %s: %w", c.Rank(), kind, err)
	}
	return nil
}
