package sparcml

import (
	"context"
	"fmt"

	"github.com/sparcml/sparcml/collectives"
)

// Allreduce reduces data element-wise across all ranks with red and leaves
// the result in data on every rank. Every rank must pass the same length
// and the same red. Avg leaves the sum divided by Size(), computed once on
// the complete sum. Under WithQuant, red must be Sum or Avg.
func Allreduce[T Float](ctx context.Context, c *Comm, data []T, red ReduceOp, opts ...CallOption) error {
	return c.run(ctx, "allreduce", allreduceFn(c, data, red), opts)
}

// StartAllreduce starts Allreduce and returns at once. data must not be
// touched until the request completes.
func StartAllreduce[T Float](ctx context.Context, c *Comm, data []T, red ReduceOp, opts ...CallOption) *Request {
	return c.start(ctx, "allreduce", allreduceFn(c, data, red), opts)
}

func allreduceFn[T Float](c *Comm, data []T, red ReduceOp) opFunc {
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		if cc.quant == QuantNone {
			return collectives.Allreduce(op, data, red, cc.algo, c.model)
		}
		codec, err := codecFor(cc, op.Rank(), op.Seq)
		if err != nil {
			return AlgoQuantizedSplit, op.Fail(fmt.Errorf("%w: %w", ErrInvalid, err))
		}
		return AlgoQuantizedSplit, collectives.QuantizedAllreduce(op, data, red, codec)
	}
}

// ReduceScatter reduces in (Size() blocks of len(out) elements) across
// ranks with red and leaves block Rank() of the result in out (NCCL
// semantics). Every rank must pass the same lengths and red; Avg divides
// the sum by Size().
func ReduceScatter[T Float](ctx context.Context, c *Comm, in, out []T, red ReduceOp, opts ...CallOption) error {
	return c.run(ctx, "reduce-scatter", reduceScatterFn(in, out, red), opts)
}

// StartReduceScatter starts ReduceScatter and returns at once.
func StartReduceScatter[T Float](ctx context.Context, c *Comm, in, out []T, red ReduceOp, opts ...CallOption) *Request {
	return c.start(ctx, "reduce-scatter", reduceScatterFn(in, out, red), opts)
}

func reduceScatterFn[T Float](in, out []T, red ReduceOp) opFunc {
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		return algoOr(cc.algo, collectives.AlgoRing), collectives.ReduceScatter(op, in, out, red, cc.algo)
	}
}

// Allgather concatenates every rank's in (all the same length) into out,
// in rank order, on every rank. len(out) must be Size()*len(in).
func Allgather[T Float](ctx context.Context, c *Comm, in, out []T, opts ...CallOption) error {
	return c.run(ctx, "allgather", allgatherFn(in, out), opts)
}

// StartAllgather starts Allgather and returns at once.
func StartAllgather[T Float](ctx context.Context, c *Comm, in, out []T, opts ...CallOption) *Request {
	return c.start(ctx, "allgather", allgatherFn(in, out), opts)
}

func allgatherFn[T Float](in, out []T) opFunc {
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		return algoOr(cc.algo, collectives.AlgoRing), collectives.Allgather(op, in, out, cc.algo)
	}
}

// Allgatherv concatenates every rank's in into out in rank order, where
// rank r contributes counts[r] elements. counts must be the same on every
// rank and len(out) its sum.
func Allgatherv[T Float](ctx context.Context, c *Comm, in, out []T, counts []int, opts ...CallOption) error {
	return c.run(ctx, "allgatherv", allgathervFn(in, out, counts), opts)
}

// StartAllgatherv starts Allgatherv and returns at once.
func StartAllgatherv[T Float](ctx context.Context, c *Comm, in, out []T, counts []int, opts ...CallOption) *Request {
	return c.start(ctx, "allgatherv", allgathervFn(in, out, counts), opts)
}

func allgathervFn[T Float](in, out []T, counts []int) opFunc {
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		return algoOr(cc.algo, collectives.AlgoRing), collectives.Allgatherv(op, in, out, counts, cc.algo)
	}
}

// Broadcast copies root's data to every rank's data. Every rank must pass
// the same length.
func Broadcast[T Float](ctx context.Context, c *Comm, data []T, root int, opts ...CallOption) error {
	return c.run(ctx, "broadcast", broadcastFn(data, root), opts)
}

// StartBroadcast starts Broadcast and returns at once.
func StartBroadcast[T Float](ctx context.Context, c *Comm, data []T, root int, opts ...CallOption) *Request {
	return c.start(ctx, "broadcast", broadcastFn(data, root), opts)
}

func broadcastFn[T Float](data []T, root int) opFunc {
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		return algoOr(cc.algo, collectives.AlgoDirect), collectives.Broadcast(op, data, root, cc.algo)
	}
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, "barrier", barrierFn, nil)
}

// StartBarrier starts a barrier and returns at once.
func (c *Comm) StartBarrier(ctx context.Context) *Request {
	return c.start(ctx, "barrier", barrierFn, nil)
}

func barrierFn(op *collectives.Op, _ callConfig) (Algo, error) {
	return collectives.AlgoDirect, collectives.Barrier(op)
}

func algoOr(a, def Algo) Algo {
	if a == AlgoAuto {
		return def
	}
	return a
}
