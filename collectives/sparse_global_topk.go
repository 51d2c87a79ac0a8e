package collectives

import (
	"fmt"
	"math"

	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// GlobalTopk is the global top-k reduction of Ok-Topk (Li and Hoefler,
// PPoPP'22): instead of the exact sum of every rank's selected entries
// (SparseAllreduce, whose result holds up to P·k entries), it returns only
// the sums that pass a global threshold chosen so that about K entries are
// kept in all, whatever P. Each rank brings its local selection k_r (any
// selection method); c is the bytes of an index plus a value.
//
//  0. Exact calls only (every GlobalTopkState.Period calls, and whenever K
//     changes): the counts-and-samples allgather of ssar-split's balanced
//     ranges (each rank sends P-1 records of 48+4q bytes, q =
//     globalTopkSamples(P), staggered by rank; in one round when
//     spDirectAgree, else Bruck's); the calls in between reuse those
//     ranges.
//  1. Sparse reduce-scatter to the owners of the ranges (ssar-split's
//     scatterToOwners): P-1 messages, k_r·c·(P-1)/P bytes.
//  2. Each owner sums its range in rank order and keeps the nonzero sums
//     the threshold rule keeps (globalTopkCut):
//     - exact calls: the K-th largest magnitude over every owner by radix
//     selection on its bits, 8 bits a round (at most 4 rounds for float32,
//     8 for float64, fewer when a digit settles it), each round an
//     allreduce of 256 counts (1 KiB, recursive doubling); entries at the
//     K-th magnitude itself are kept in index order up to K, each owner's
//     share from one allreduce of P counts, or two of about sqrt P when
//     the model predicts them cheaper (tieGroup). Counts travel as
//     float32 up to 2^24 entries. Exactly min(K, nonzero sums) are kept.
//     - other calls: the state's estimate (EstimateHistogram: one
//     allreduce of 257 counts of the sums by magnitude around the last
//     threshold, the exact selection when the K-th falls outside them;
//     EstimateReuse: the last threshold, no communication).
//  3. Bruck allgather of the kept ranges (ssar-split's gatherRanges), each
//     in its smaller encoding: about K·c·(P-1)/P bytes.
//
// Messages: P-1 + ceil(log2 P), plus on exact calls ceil(log2 P) for the
// ranges and ceil(log2 P) per selection round (one round on estimated
// calls). Bytes sent per rank: (k_r + K)·c·(P-1)/P, plus about
// 1 KiB·ceil(log2 P) per selection round; Ok-Topk's bound is
// 6K(P-1)/P words (index and value).
//
// Every index is decided by exactly one owner, so the result is the same
// on every rank. dropped receives this rank's entries of in that the
// result does not hold: what error feedback puts back into the residual.
// A sum that is exactly zero is never kept (it carries nothing), so its
// senders get their values back. With opts.Reduce Avg the kept sums are
// divided by P, the ranks that did not send an index counting as zeros.
func GlobalTopk[T Float](op *Op, in, out, dropped *sparse.Vector[T], st *GlobalTopkState, opts GlobalTopkOptions) (GlobalTopkStats, error) {
	var res GlobalTopkStats
	if err := sparseCheckOp(op); err != nil {
		return res, err
	}
	op.Desc = spDesc[T](transport.OpGlobalTopk, opts.Reduce, opts.Quant, AlgoSSARSplitAllgather)
	switch {
	case opts.Reduce != Sum && opts.Reduce != Avg:
		return res, sparseFailInvalid(op, "global top-k supports sum and avg, not %v", opts.Reduce)
	case in == nil || out == nil || dropped == nil || st == nil || in == out || in == dropped || out == dropped:
		return res, sparseFailInvalid(op, "global top-k needs distinct non-nil input, output and dropped vectors and a state")
	case opts.K < 0 || uint64(opts.K) > math.MaxUint32:
		return res, sparseFailInvalid(op, "global top-k of %d entries", opts.K)
	case !opts.Quant.Valid():
		return res, sparseFailInvalid(op, "unknown value codec %v", opts.Quant)
	}
	// Every message carries K (in Root, which the op has no other use
	// for), so ranks that pass different ones fail with ErrMismatch
	// instead of running different numbers of selection rounds.
	op.Desc.Count, op.Desc.Root = uint64(in.Dim), int32(uint32(opts.K))
	if err := in.Validate(); err != nil {
		return res, op.Fail(fmt.Errorf("%w: input of rank %d: %w", transport.ErrInvalid, op.commRank(op.Rank()), err))
	}
	if in.IsBlock() {
		return res, sparseFailInvalid(op, "global top-k selects values, not rows: rank %d passed a block vector", op.commRank(op.Rank()))
	}
	if opts.Model == (CostModel{}) {
		opts.Model = DefaultCostModel
	}
	c := newSpCall(op, in)
	err := c.globalTopk(out, dropped, st, opts, &res)
	if err != nil {
		c.sc.abandon()
		return res, err
	}
	c.sc.release()
	return res, nil
}

// GlobalTopkOptions are the arguments every rank must pass alike (K,
// Reduce and Quant travel in every message's descriptor: ranks that
// differ fail with ErrMismatch on every rank).
type GlobalTopkOptions struct {
	// K is the number of entries the result should hold in all (density
	// times dimension): exactly min(K, nonzero sums) on exact calls, about
	// K on the others.
	K int
	// Reduce is Sum (the zero value) or Avg.
	Reduce ReduceOp
	// Quant and QuantSeed are SparseOptions' value codec: each
	// contribution is quantized once by its sender, each kept range once
	// by its owner. The threshold is applied to the owner's sum of the
	// decoded contributions.
	Quant     quant.Kind
	QuantSeed uint64
	// Model is the cost model carried in the ranges' exchange (zero:
	// DefaultCostModel).
	Model CostModel
	// DenseOut asks for the result in dense form.
	DenseOut bool
}

// GlobalTopkStats describes one GlobalTopk on this rank.
type GlobalTopkStats struct {
	// Exact says the threshold was the exact K-th magnitude of this
	// call's sums; otherwise it was the state's estimate.
	Exact bool
	// Threshold is the magnitude the rule kept sums at or above (0: every
	// nonzero sum).
	Threshold float64
	// Kept is the number of entries of the result, on every rank alike.
	Kept int
	// Dropped is the number of this rank's entries the result does not
	// hold.
	Dropped int
	// Rounds is the number of selection rounds of an exact call.
	Rounds int
	// Bounds are the owners' ranges: rank i owns [Bounds[i], Bounds[i+1])
	// (the state's own slice, kept until the next exact call: read only).
	Bounds []int
}

// globalTopkSamples is the index samples each rank contributes to the
// balanced ranges: 4096 over every rank, at least 4 per rank and at most
// 256. The ranges are cut from every rank's samples merged
// (balancedBounds); staggered by rank, the ranks' samples fall at P·q
// distinct quantiles, 4 or more per range. Each sample is 4 bytes sent to
// P-1 ranks: at 1% of 256K on 10 Gbit/s, 4 a rank at 1024 ranks sent
// fewer bytes and took less time than 16, and 8 at 512 than 16
// (`sparcml sim -n 512,1024 --op compress --scope global`,
// docs/SIMULATION.md).
func globalTopkSamples(p int) int { return min(max(4096/max(p, 1), 4), 256) }

// globalTopk runs the schedule of GlobalTopk.
func (c *spCall[T]) globalTopk(out, dropped *sparse.Vector[T], st *GlobalTopkState, opts GlobalTopkOptions, res *GlobalTopkStats) error {
	exact := st.exactDue(opts.K, c.in.Dim, c.p)
	if exact {
		ag, err := c.agreeSampled(SparseOptions{Algo: AlgoSSARSplitAllgather, Balanced: true, Model: opts.Model}, spExchange{q: globalTopkSamples(c.p), stagger: true, direct: spDirectAgree(opts.Model, c.p)})
		if err != nil {
			return err
		}
		st.bounds = ag.balancedBounds(c.in.Dim, c.p)
	}
	c.bounds = st.bounds
	if err := c.setQuant(opts.Quant, opts.QuantSeed); err != nil {
		return err
	}
	parts, err := c.scatterToOwners()
	if err != nil {
		return err
	}
	red := c.vector()
	if err := sparse.SumAll(red, parts); err != nil {
		return c.op.Fail(err)
	}
	cut, err := c.thresholdRule(red, st, opts, &exact, res)
	if err != nil {
		return err
	}
	kept := c.vector()
	keepAbove(kept, red, cut)
	if err := c.gatherRanges(kept, out, opts.DenseOut); err != nil {
		return err
	}
	res.Exact, res.Threshold, res.Bounds = exact, keyMagnitude[T](cut.key), st.bounds
	res.Kept = storedNonzero(out)
	res.Dropped = droppedEntries(c.in, out, dropped)
	finishReduce(opts.Reduce, out.Values, c.p)
	st.update(opts.K, exact, res.Threshold)
	return nil
}

// thresholdRule returns the rule of this call: the exact selection on an
// exact call, else the state's estimate (which may fall back to the exact
// selection, setting *exact).
func (c *spCall[T]) thresholdRule(red *sparse.Vector[T], st *GlobalTopkState, opts GlobalTopkOptions, exact *bool, res *GlobalTopkStats) (globalTopkCut, error) {
	k := opts.K
	if !*exact {
		if st.Estimator == EstimateReuse {
			return globalTopkCut{key: magnitudeKey[T](st.threshold), quota: math.MaxInt}, nil
		}
		cut, ok, err := c.estimateCut(red, k, st.threshold, res)
		if ok || err != nil {
			return cut, err
		}
		*exact = true
	}
	return c.selectKth(red, k, opts.Model, res)
}

// globalTopkCut is the threshold rule: an owner keeps a nonzero sum whose
// magnitude key is above key, and of those equal to key the first quota
// in index order.
type globalTopkCut struct {
	key   uint64
	quota int
}

// keepAbove sets kept to the entries of red (a range vector, sparse or
// dense) that cut keeps, in index order.
func keepAbove[T Float](kept, red *sparse.Vector[T], cut globalTopkCut) {
	kept.Reset(red.Dim)
	ties := 0
	for j, x := range red.Values {
		key := magnitudeKeyOf(x)
		if x == 0 || key < cut.key {
			continue
		}
		if key == cut.key {
			if ties >= cut.quota {
				continue
			}
			ties++
		}
		kept.Indices = append(kept.Indices, storedIndex(red, j))
		kept.Values = append(kept.Values, x)
	}
}

// storedIndex is the index of v's j-th stored value: j itself when v is
// dense. The owners' passes over their sums loop over Values with it
// rather than call a function per entry (BenchmarkCompressorScopes).
func storedIndex[T Float](v *sparse.Vector[T], j int) uint32 {
	if v.Dense {
		return uint32(j)
	}
	return v.Indices[j]
}

// storedNonzero counts the nonzero values of v.
func storedNonzero[T Float](v *sparse.Vector[T]) int {
	n := 0
	for _, x := range v.Values {
		if x != 0 {
			n++
		}
	}
	return n
}

// droppedEntries sets dropped to the nonzero entries of in at which out
// holds zero or nothing, and returns their count.
func droppedEntries[T Float](in, out, dropped *sparse.Vector[T]) int {
	dropped.Reset(in.Dim)
	j := 0
	for e, x := range in.Values {
		if x == 0 {
			continue
		}
		i := storedIndex(in, e)
		var got T
		if out.Dense {
			got = out.Values[i]
		} else {
			for j < len(out.Indices) && out.Indices[j] < i {
				j++
			}
			if j < len(out.Indices) && out.Indices[j] == i {
				got = out.Values[j]
			}
		}
		if got == 0 {
			dropped.Indices = append(dropped.Indices, i)
			dropped.Values = append(dropped.Values, x)
		}
	}
	return len(dropped.Indices)
}

// magnitudeKey orders magnitudes as unsigned integers: the bits of |x| in
// T's width, which for non-negative floats grow with the value.
func magnitudeKey[T Float](x float64) uint64 {
	if sparse.ValueSize[T]() == 4 {
		return uint64(math.Float32bits(float32(math.Abs(x))))
	}
	return math.Float64bits(math.Abs(x))
}

// magnitudeKeyOf is magnitudeKey(float64(x)) without the conversions:
// x's bits with the sign cleared. A float32 NaN takes the conversions,
// which make it quiet, so that its key is magnitudeKey's too.
func magnitudeKeyOf[T Float](x T) uint64 {
	if sparse.ValueSize[T]() == 8 {
		return math.Float64bits(float64(x)) &^ (1 << 63)
	}
	if x != x {
		return magnitudeKey[T](float64(x))
	}
	return uint64(math.Float32bits(float32(x)) &^ (1 << 31))
}

// keyMagnitude undoes magnitudeKey; keys above infinity's (the rule of K
// = 0) are infinity.
func keyMagnitude[T Float](key uint64) float64 {
	if key > magnitudeKey[T](math.Inf(1)) {
		return math.Inf(1)
	}
	if sparse.ValueSize[T]() == 4 {
		return float64(math.Float32frombits(uint32(key)))
	}
	return math.Float64frombits(key)
}
