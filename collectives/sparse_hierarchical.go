package collectives

import (
	"fmt"

	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
)

// Hierarchical sparse allreduce, on Op.Topo's H hosts of L ranks each:
//
//  1. Within each host, the ranks sum their vectors with the sparse
//     allreduce (the model picks sparse or dense, whichever moves fewer
//     bytes; exact either way), so every rank holds its host's sum.
//  2. The dimension is cut into L ranges; local rank l takes range l of
//     its host's sum and sums it across hosts with the ranks of index l on
//     the other hosts (one sparse allreduce over H ranks per range, all L
//     at once): each host's link carries its host's contribution once.
//  3. Within each host, the ranks gather the L summed ranges (sparse
//     allgather) and put them together.
//
// Bytes: step 1 and 3 stay on the host; across hosts each range moves
// what a flat sparse allreduce over H ranks would move for it. Values are
// exact (no codec: a lossy one would quantize the partial sums of step 1
// again in step 2). Avg is the sum divided by P at the end. Phase 3's
// steps start at hierarchicalGatherBase, as in the dense algorithm, since
// phases 1 and 3 use the same pairs of ranks.

// hierarchicalSparseAllreduce runs the schedule above.
func hierarchicalSparseAllreduce[T Float](op *Op, in, out *sparse.Vector[T], opts SparseOptions) (SparseStats, error) {
	st := SparseStats{Algo: AlgoHierarchical, NNZIn: in.NNZ()}
	lv, err := topologyLevels(op)
	if err != nil {
		return st, err
	}
	if opts.Quant != quant.None {
		return st, sparseFailInvalid(op, "the hierarchical sparse allreduce sends exact values, not %v", opts.Quant)
	}
	inner := SparseOptions{Reduce: Sum, Algo: AlgoAuto, Model: opts.Model}
	host := in
	if len(lv.local) > 1 {
		host = &sparse.Vector[T]{}
		if _, err := SparseAllreduce(subOpFixed(op, lv.local, 0), in, host, inner); err != nil {
			return st, err
		}
	}
	ranges := balanced(in.Dim, len(lv.local))
	lo, hi := ranges.block(lv.localIndex)
	// Every range travels with the largest range's width as its dimension,
	// since the sparse collectives need one dimension on all ranks.
	width := ranges.largest()
	part := sliceRange(host, lo, hi, width)
	if len(lv.cross) > 1 {
		sum := &sparse.Vector[T]{}
		if _, err := SparseAllreduce(subOpFixed(op, lv.cross, 0), part, sum, inner); err != nil {
			return st, err
		}
		part = sum
	}
	parts := []*sparse.Vector[T]{part}
	if len(lv.local) > 1 {
		if parts, err = SparseAllgather(subOpFixed(op, lv.local, hierarchicalGatherBase), part, nil); err != nil {
			return st, err
		}
	}
	for i, p := range parts {
		if err := checkRange(p, ranges, i, width); err != nil {
			return st, sparseFailInvalid(op, "%v", err)
		}
	}
	joinRanges(out, parts, ranges, in.Dim, opts.DenseOut)
	finishReduce(opts.Reduce, out.Values, op.Size())
	st.NNZOut = out.NNZ()
	return st, nil
}

// topologyLevels checks that op has a topology the hierarchical algorithms
// can use and returns this rank's levels; otherwise it fails the operation
// on every rank with the reason.
func topologyLevels(op *Op) (levels, error) {
	if op.Topo == nil {
		return levels{}, failInvalid(op, "the hierarchical algorithms need the hosts of the ranks (no topology)")
	}
	if len(op.Topo.Hosts) != op.Size() {
		return levels{}, failInvalid(op, "topology of %d ranks on a communicator of %d", len(op.Topo.Hosts), op.Size())
	}
	lv, err := op.Topo.twoLevels(op.Rank())
	if err != nil {
		return levels{}, failInvalid(op, "%v", err)
	}
	return lv, nil
}

// sliceRange returns v's entries in [lo, hi) as a vector of dimension
// width >= hi-lo (indices shifted down by lo; in dense form zeros beyond
// hi-lo), in v's form, sharing no buffer with v.
func sliceRange[T Float](v *sparse.Vector[T], lo, hi, width int) *sparse.Vector[T] {
	if v.Dense {
		vals := make([]T, width)
		copy(vals, v.Values[lo:hi])
		return &sparse.Vector[T]{Dim: width, Dense: true, Values: vals}
	}
	a, b := v.RangeBounds(lo, hi)
	out := &sparse.Vector[T]{Dim: width, Indices: make([]uint32, b-a), Values: append([]T(nil), v.Values[a:b]...)}
	for i, x := range v.Indices[a:b] {
		out.Indices[i] = x - uint32(lo)
	}
	return out
}

// checkRange reports how part, the sum of range i, breaks its shape: a
// dimension other than width, or an entry beyond the range.
func checkRange[T Float](part *sparse.Vector[T], ranges layout, i, width int) error {
	lo, hi := ranges.block(i)
	if part.Dim != width {
		return fmt.Errorf("range %d came back with dimension %d, want %d", i, part.Dim, width)
	}
	if part.Dense {
		for _, x := range part.Values[hi-lo:] {
			if x != 0 {
				return fmt.Errorf("range %d came back with a value beyond its %d entries", i, hi-lo)
			}
		}
		return nil
	}
	if n := len(part.Indices); n > 0 && int(part.Indices[n-1]) >= hi-lo {
		return fmt.Errorf("range %d came back with index %d beyond its %d entries", i, part.Indices[n-1], hi-lo)
	}
	return nil
}

// joinRanges puts the vectors of ranges' blocks back together into out, of
// dimension dim, in the smaller form (dense when asked for, or when any
// part is dense). parts[i] has block i's length as its dimension.
func joinRanges[T Float](out *sparse.Vector[T], parts []*sparse.Vector[T], ranges layout, dim int, denseOut bool) {
	nnz, anyDense := 0, false
	for _, p := range parts {
		nnz += p.NNZ()
		anyDense = anyDense || p.Dense
	}
	if denseOut || anyDense || sparse.PreferDense(nnz, dim, sparse.ValueSize[T]()) {
		if cap(out.Values) < dim {
			out.Values = make([]T, dim)
		}
		out.Values = out.Values[:dim]
		clear(out.Values)
		for i, p := range parts {
			lo, hi := ranges.block(i)
			if p.Dense {
				copy(out.Values[lo:hi], p.Values)
				continue
			}
			for j, x := range p.Indices {
				out.Values[lo+int(x)] = p.Values[j]
			}
		}
		out.Dim, out.Dense, out.Indices = dim, true, out.Indices[:0]
		return
	}
	out.Reset(dim)
	for i, p := range parts {
		lo, _ := ranges.block(i)
		for j, x := range p.Indices {
			out.Indices = append(out.Indices, x+uint32(lo))
			out.Values = append(out.Values, p.Values[j])
		}
	}
}
