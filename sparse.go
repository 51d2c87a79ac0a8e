package sparcml

import (
	"context"
	"fmt"
	"strings"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/internal/sparseplan"
	"github.com/sparcml/sparcml/transport"
)

// SparseStats describes one sparse allreduce on this rank: the algorithm
// that ran (never AlgoAuto once the call succeeded), nonzero counts in and
// out, and the cost model's predictions.
type SparseStats = collectives.SparseStats

// Sparse allreduce algorithms (SparCML's three and the allgather baseline).
const (
	AlgoSSARRecursiveDoubling = collectives.AlgoSSARRecursiveDoubling
	AlgoSSARSplitAllgather    = collectives.AlgoSSARSplitAllgather
	AlgoDSAR                  = collectives.AlgoDSAR
	AlgoSparseAllgather       = collectives.AlgoSparseAllgather
)

// WithBalancedRanges places the split algorithms' index-range boundaries
// where the nonzeros actually are (quantiles sampled on every rank) instead
// of equal ranges, so skewed indices do not overload one owner.
func WithBalancedRanges() CallOption { return func(c *callConfig) { c.balanced = true } }

// IndexWire says how a sparse allreduce of exact values sends its
// indices: IndexAuto (the default: the calibrated cost model packs them
// where the network is slow enough for the bytes saved to outweigh the
// packing), IndexRaw or IndexPacked (lossless delta and bit-packing).
// Messages say in-band which they carry, so every rank may choose its own.
type IndexWire = collectives.IndexWire

// Index wires for WithIndices.
const (
	IndexAuto   = collectives.IndexAuto
	IndexRaw    = collectives.IndexRaw
	IndexPacked = collectives.IndexPacked
)

// WithIndices sets how a sparse allreduce of exact values sends its
// indices (ignored under WithQuant, whose messages always pack them).
func WithIndices(w IndexWire) CallOption { return func(c *callConfig) { c.indices = w } }

// ParseIndexWire parses "auto", "raw" or "packed", ignoring case.
func ParseIndexWire(s string) (IndexWire, error) {
	for _, w := range []IndexWire{IndexAuto, IndexRaw, IndexPacked} {
		if strings.EqualFold(s, w.String()) {
			return w, nil
		}
	}
	return IndexAuto, fmt.Errorf("%w: index wire %q: want auto, raw or packed", ErrInvalid, s)
}

// WithTensor names the tensor a sparse allreduce reduces: calls that pass
// the same id, with the same dimension, value type and options, reduce one
// tensor whose density changes slowly (a layer's gradient, step after
// step), so under AlgoAuto or WithBalancedRanges they reuse the decision
// of a counts exchange (algorithm, index wire, ranges) for several calls
// instead of exchanging counts on every call. Give each tensor of a step
// an id of its own, the same every step, and the same on every rank.
// Without it every call exchanges: the call alone cannot tell two tensors
// of one shape apart.
//
// WithTensor(id) exchanges again every SPARCML_SPARSE_AGREE_EVERY calls
// (16 by default); WithTensor(id, n) every n calls (n >= 1; 1: on every
// call), for a tensor whose density drifts faster or slower than the
// others'. Every rank must pass the same n. An n below 1, or more than
// one, fails the call with ErrInvalid.
func WithTensor(id uint64, agreeEvery ...int) CallOption {
	every := 0
	switch {
	case len(agreeEvery) > 1 || len(agreeEvery) == 1 && agreeEvery[0] < 1:
		every = -1
	case len(agreeEvery) == 1:
		every = agreeEvery[0]
	}
	return func(c *callConfig) { c.tensor, c.tagged, c.agreeEvery = id, true, every }
}

// WithDenseOutput asks for the sparse allreduce's result in dense form
// even when the sparse form would be smaller.
func WithDenseOutput() CallOption { return func(c *callConfig) { c.denseOut = true } }

// SparseAllreduce reduces every rank's sparse vector in with red, Sum or
// Avg (the sum divided by Size()), and leaves the result in out on every
// rank, moving only what is stored and switching to dense exactly when
// that is smaller. Every rank must pass the same dimension and red; each
// may bring any number of entries, zero included. out comes back in
// whichever form is smaller (dense with WithDenseOutput or AlgoDSAR) and
// its buffers are reused. By default the cost model chooses the algorithm
// from every rank's nonzero count; WithAlgo forces one.
//
// Under AlgoAuto or WithBalancedRanges the ranks first exchange their
// counts and index samples; calls tagged WithTensor reuse the decision
// made from them (SparseStats.Reused says which calls did).
func SparseAllreduce[T Float](ctx context.Context, c *Comm, in, out *SparseVector[T], red ReduceOp, opts ...CallOption) (SparseStats, error) {
	var st SparseStats
	err := c.run(ctx, "sparse-allreduce", sparseAllreduceFn(c, in, out, red, &st, sparseTicket(c, in, red, opts)), opts)
	return st, err
}

// StartSparseAllreduce starts SparseAllreduce and returns at once; in and
// out must not be touched until the request completes. The request's
// SparseStats are valid once it has completed.
func StartSparseAllreduce[T Float](ctx context.Context, c *Comm, in, out *SparseVector[T], red ReduceOp, opts ...CallOption) *Request {
	st := &SparseStats{}
	r := c.start(ctx, "sparse-allreduce", sparseAllreduceFn(c, in, out, red, st, sparseTicket(c, in, red, opts)), opts)
	r.sparse = st
	return r
}

func sparseAllreduceFn[T Float](c *Comm, in, out *SparseVector[T], red ReduceOp, st *SparseStats, tk sparseplan.Ticket) opFunc {
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		defer tk.Keep(nil) // a call that made no plan
		if cc.agreeEvery < 0 {
			return cc.algo, op.Fail(fmt.Errorf("%w: WithTensor takes one interval of at least 1 call", ErrInvalid))
		}
		plan, err := tk.Plan(op.Ctx)
		if err != nil {
			return cc.algo, op.Fail(err)
		}
		s, err := collectives.SparseAllreduce(op, in, out, collectives.SparseOptions{
			Reduce: red, Algo: cc.algo, Model: c.model, Balanced: cc.balanced, DenseOut: cc.denseOut,
			Quant: cc.quant, QuantSeed: quantSeed(op.Rank(), op.Seq), Indices: cc.indices, Plan: plan,
		})
		tk.Keep(s.Plan)
		*st = s
		return s.Algo, err
	}
}

// sparseTicket takes a sparse allreduce's turn in the communicator's plans
// (internal/sparseplan), in start order; none when the call will not run.
func sparseTicket[T Float](c *Comm, in *SparseVector[T], red ReduceOp, opts []CallOption) sparseplan.Ticket {
	if in == nil || c.usable("sparse-allreduce") != nil {
		return sparseplan.Ticket{}
	}
	cc := c.callConfig(opts)
	if cc.agreeEvery < 0 {
		return sparseplan.Ticket{}
	}
	key := sparseplan.Key{Tensor: cc.tensor, Dim: in.Dim, Block: in.BlockLen(), DType: collectives.DTypeOf[T](), Red: red, Algo: cc.algo,
		Balanced: cc.balanced, Quant: cc.quant, Indices: cc.indices, Every: cc.agreeEvery}
	return c.plans.Ticket(key, cc.tagged)
}

// SparseAllgather delivers every rank's sparse vector to every rank: on
// return out[r] holds rank r's in, in whichever form is smaller. len(out)
// must be Size(), as Allgather's out must be Size() times its in. Vectors
// already in out are overwritten, reusing their buffers; nil entries are
// allocated (so a caller that keeps out does not allocate in steady
// state). Every rank must pass the same dimension.
func SparseAllgather[T Float](ctx context.Context, c *Comm, in *SparseVector[T], out []*SparseVector[T], opts ...CallOption) error {
	return c.run(ctx, "sparse-allgather", sparseAllgatherFn(in, out), opts)
}

// StartSparseAllgather starts SparseAllgather and returns at once; in and
// out (the slice and its vectors) must not be touched until the request
// completes.
func StartSparseAllgather[T Float](ctx context.Context, c *Comm, in *SparseVector[T], out []*SparseVector[T], opts ...CallOption) *Request {
	return c.start(ctx, "sparse-allgather", sparseAllgatherFn(in, out), opts)
}

func sparseAllgatherFn[T Float](in *SparseVector[T], out []*SparseVector[T]) opFunc {
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		if len(out) != op.Size() {
			op.Desc = transport.Desc{Kind: transport.OpSparseAllgather} // names the operation in the error
			return collectives.AlgoDirect, op.Fail(fmt.Errorf("%w: sparse allgather: len(out) = %d, want one vector per rank (%d)", ErrInvalid, len(out), op.Size()))
		}
		_, err := collectives.SparseAllgatherWith(op, in, out, collectives.SparseAllgatherOptions{
			Quant: cc.quant, QuantSeed: quantSeed(op.Rank(), op.Seq),
		})
		return collectives.AlgoDirect, err
	}
}
