package sparcml

import (
	"context"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/sparse"
)

// SparseVector is a vector of a dimension holding either sorted unique
// (index, value) pairs or all its values (see package sparse).
type SparseVector[T Float] = sparse.Vector[T]

// SparseStats describes one sparse allreduce on this rank: the algorithm
// chosen, nonzero counts in and out, and the cost model's predictions.
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

// WithDenseOutput asks for the sparse allreduce's result in dense form
// even when the sparse form would be smaller.
func WithDenseOutput() CallOption { return func(c *callConfig) { c.denseOut = true } }

// SparseAllreduce sums every rank's sparse vector in and leaves the sum in
// out on every rank, moving only what is stored and switching to dense
// exactly when that is smaller. Every rank must pass the same dimension;
// each may bring any number of entries, zero included. out comes back in
// whichever form is smaller (dense with WithDenseOutput or AlgoDSAR) and its
// buffers are reused. By default the cost model chooses the algorithm from
// every rank's nonzero count; WithAlgo forces one.
func SparseAllreduce[T Float](ctx context.Context, c *Comm, in, out *SparseVector[T], opts ...CallOption) (SparseStats, error) {
	var st SparseStats
	err := c.run(ctx, "sparse-allreduce", sparseAllreduceFn(c, in, out, &st), opts)
	return st, err
}

// StartSparseAllreduce starts SparseAllreduce and returns at once; in and
// out must not be touched until the request completes. The request's
// SparseStats are valid once it has completed.
func StartSparseAllreduce[T Float](ctx context.Context, c *Comm, in, out *SparseVector[T], opts ...CallOption) *Request {
	st := &SparseStats{}
	r := c.start(ctx, "sparse-allreduce", sparseAllreduceFn(c, in, out, st), opts)
	r.sparse = st
	return r
}

func sparseAllreduceFn[T Float](c *Comm, in, out *SparseVector[T], st *SparseStats) opFunc {
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		s, err := collectives.SparseAllreduce(op, in, out, collectives.SparseOptions{
			Algo: cc.algo, Model: c.model, Balanced: cc.balanced, DenseOut: cc.denseOut,
			Quant: cc.quant, QuantSeed: quantSeed(op.Rank(), op.Seq),
		})
		*st = s
		return s.Algo, err
	}
}

// SparseAllgather delivers every rank's sparse vector to every rank:
// out[r] holds rank r's in. out's vectors are reused when given.
func SparseAllgather[T Float](ctx context.Context, c *Comm, in *SparseVector[T], out []*SparseVector[T], opts ...CallOption) ([]*SparseVector[T], error) {
	err := c.run(ctx, "sparse-allgather", sparseAllgatherFn(in, &out), opts)
	return out, err
}

// StartSparseAllgather starts SparseAllgather; *out holds the result once
// the request completes.
func StartSparseAllgather[T Float](ctx context.Context, c *Comm, in *SparseVector[T], out *[]*SparseVector[T], opts ...CallOption) *Request {
	return c.start(ctx, "sparse-allgather", sparseAllgatherFn(in, out), opts)
}

func sparseAllgatherFn[T Float](in *SparseVector[T], out *[]*SparseVector[T]) opFunc {
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		res, err := collectives.SparseAllgatherWith(op, in, *out, collectives.SparseAllgatherOptions{
			Quant: cc.quant, QuantSeed: quantSeed(op.Rank(), op.Seq),
		})
		*out = res
		return collectives.AlgoDirect, err
	}
}
