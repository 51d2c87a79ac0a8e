package sparcml

import (
	"context"
	"fmt"

	"github.com/sparcml/sparcml/collectives"
)

// The global scope of Compressor (ScopeGlobal): collectives.GlobalTopk on
// the selected entries, what it drops put back into the residual, and
// with GlobalComplete a second operation that completes the kept sums:
//
//  1. global-topk: GlobalTopk's schedule (collectives/sparse_global_topk.go),
//     about (k + K)·c·(P-1)/P bytes per rank;
//  2. global-complete (GlobalComplete only): every rank gathers its
//     residual at the K' kept indices (zero where it sent the entry), an
//     allreduce of those K' values (the cost model's algorithm; ring:
//     2·K'·sizeof(T)·(P-1)/P bytes), the sum divided by P added to the
//     kept entries, and those residual entries cleared.
//
// The second operation takes its sequence number in the caller's
// goroutine, right after the first, and waits for it in its own, so
// every rank runs the two in the same order.

// startGlobal starts the global top-k reduction of the selected entries
// (ScopeGlobal): the average of the kept sums, every rank's sum divided by
// Size(), the ranks that did not select an index counting as zeros (with
// GlobalComplete: counting with their residuals).
func (z *Compressor[T]) startGlobal(ctx context.Context, r *CompressRequest, grad []T, dst *SparseVector[T], intoGrad bool) *CompressRequest {
	k := r.stats.K
	gs := new(GlobalTopkStats)
	fn := func(op *collectives.Op, _ callConfig) (Algo, error) {
		var err error
		*gs, err = collectives.GlobalTopk(op, &z.send, dst, &z.dropped, &z.global, collectives.GlobalTopkOptions{
			K: k, Reduce: Avg, Quant: z.cfg.Quant, QuantSeed: quantSeed(op.Rank(), op.Seq), Model: z.c.model,
		})
		return AlgoSSARSplitAllgather, err
	}
	sr := z.c.start(ctx, "global-topk", fn, nil)
	var complete *Request
	if z.cfg.GlobalComplete {
		complete = z.c.start(ctx, "global-complete", func(op *collectives.Op, _ callConfig) (Algo, error) {
			// Bounded by the first operation's own context, as in finish.
			if err := sr.Wait(context.Background()); err != nil {
				return AlgoAuto, op.Fail(err)
			}
			return z.complete(op, dst)
		}, nil)
	}
	go z.finishGlobal(r, sr, complete, grad, dst, intoGrad, gs)
	return r
}

// complete adds to every kept entry of avg (the average of the selected
// entries, sparse or dense) the average of every rank's residual at its
// index, and clears those residual entries (with momentum-factor
// masking, their velocity too, as for the entries selected).
func (z *Compressor[T]) complete(op *collectives.Op, avg *SparseVector[T]) (Algo, error) {
	z.keptIdx, z.fill = z.keptIdx[:0], z.fill[:0]
	res := z.sp.Residual()
	add := func(i uint32) {
		z.keptIdx = append(z.keptIdx, i)
		z.fill = append(z.fill, res[i])
	}
	if avg.Dense {
		for i, x := range avg.Values {
			if x != 0 {
				add(uint32(i))
			}
		}
	} else {
		for _, i := range avg.Indices {
			add(i)
		}
	}
	algo, err := collectives.Allreduce(op, z.fill, Sum, AlgoAuto, z.c.model)
	if err != nil {
		return algo, err
	}
	vel := z.sp.Velocity()
	if z.cfg.Sparsify.NoMomentumMasking {
		vel = nil
	}
	p := T(z.c.Size())
	for j, i := range z.keptIdx {
		if avg.Dense {
			avg.Values[i] += z.fill[j] / p
		} else {
			avg.Values[j] += z.fill[j] / p
		}
		res[i] = 0
		if vel != nil {
			vel[i] = 0
		}
	}
	return algo, nil
}

// finishGlobal waits for the global top-k (and its completion), returns
// what it dropped to the residual and puts the average in place.
func (z *Compressor[T]) finishGlobal(r *CompressRequest, sr, complete *Request, grad []T, avg *SparseVector[T], intoGrad bool, gs *GlobalTopkStats) {
	defer close(r.done)
	// Bounded by its own context, as in finish.
	if err := sr.Wait(context.Background()); err != nil {
		if complete != nil {
			_ = complete.Wait(context.Background())
		}
		_ = z.sp.Restore(&z.send)
		r.err = err
		return
	}
	if complete != nil {
		if err := complete.Wait(context.Background()); err != nil {
			// complete clears residual entries only once its allreduce
			// succeeded: on failure the residual is intact, and every
			// selected entry goes back into it.
			_ = z.sp.Restore(&z.send)
			r.err = err
			return
		}
	}
	if err := z.sp.Restore(&z.dropped); err != nil {
		r.err = fmt.Errorf("sparcml: rank %d: compressed reduction: %w", z.c.Rank(), err)
		return
	}
	r.stats.Global, r.stats.Algo, r.stats.NNZOut = *gs, AlgoSSARSplitAllgather, gs.Kept
	if intoGrad {
		avg.ToDense(grad)
	}
}
