package collectives

import (
	"github.com/sparcml/sparcml/sparse"
)

// dsarAllreduce is SparCML's DSAR split-allgather: the same sparse
// reduce-scatter as ssarSplitAllgather, but every owner accumulates its
// range straight into its block of the dense output (scatter-adds, no
// merge) and the last phase is a dense ring allgather of the blocks in
// place, every segment received where it belongs. The result is dense.
//
// Messages: P-1 + (P-1) per segment of a block. Bytes sent per rank:
// about k*c*(P-1)/P, then n*s*(P-1)/P: the choice when the result is dense
// anyway.
func dsarAllreduce[T Float](c *spCall[T], out *sparse.Vector[T]) error {
	if c.q != nil {
		return dsarQuantized(c, out)
	}
	dim := c.in.Dim
	out.Reset(dim)
	out.Dense = true
	out.Values = out.Values[:0]
	if cap(out.Values) < dim {
		out.Values = make([]T, 0, dim)
	}
	out.Values = out.Values[:dim]
	// The other blocks' receives are posted before the reduce-scatter, so
	// that a neighbour that finishes its range first sends it straight
	// into place rather than as unexpected messages to copy.
	l := layout{n: dim, k: c.p, offs: c.bounds}
	gather := postRingAllgather(c.op, out.Values, l, c.rank, spStepDenseGather, segmentElems[T]())
	parts, err := c.scatterToOwners()
	if err != nil {
		return err
	}
	acc := out.Values[c.bounds[c.rank]:c.bounds[c.rank+1]]
	clear(acc)
	// In rank order, window by window (sparse.AddAllTo), so every
	// element's sum is the same on every rank.
	if err := sparse.AddAllTo(acc, parts); err != nil {
		return c.op.Fail(err)
	}
	return gather.run()
}

// dsarQuantized is DSAR with a lossy codec: each owner quantizes its
// reduced range once and the ranges travel as blobs (see
// ssarSplitAllgather), so the result is bit-identical everywhere.
func dsarQuantized[T Float](c *spCall[T], out *sparse.Vector[T]) error {
	parts, err := c.scatterToOwners()
	if err != nil {
		return err
	}
	acc := c.vector()
	n := c.bounds[c.rank+1] - c.bounds[c.rank]
	acc.Dim, acc.Dense = n, true
	acc.Values = append(acc.Values[:0], make([]T, n)...)
	if err := sparse.AddAllTo(acc.Values, parts); err != nil {
		return c.op.Fail(err)
	}
	return c.gatherRanges(acc, out, true)
}
