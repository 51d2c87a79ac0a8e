package collectives

import (
	"github.com/sparcml/sparcml/sparse"
)

// dsarAllreduce is SparCML's DSAR split-allgather: the same sparse
// reduce-scatter as ssarSplitAllgather, but every owner accumulates its
// range into a dense array (scatter-adds, no merge) and the last phase is a
// dense Bruck allgather of the ranges. The result is dense.
//
// Messages: P-1 + ceil(log2 P). Bytes sent per rank: about k*c*(P-1)/P,
// then n*s*(P-1)/P: the choice when the result is dense anyway.
func dsarAllreduce[T Float](c *spCall[T], out *sparse.Vector[T]) error {
	parts, err := c.scatterToOwners()
	if err != nil {
		return err
	}
	n := c.bounds[c.rank+1] - c.bounds[c.rank]
	acc := c.vector()
	acc.Dim, acc.Dense = n, true
	acc.Values = acc.Values[:0]
	acc.Values = append(acc.Values, make([]T, n)...) // zeroed, reusing capacity
	// In rank order, so every element's sum is the same on every rank.
	for _, v := range parts {
		if err := v.AddTo(acc.Values); err != nil {
			return c.op.Fail(err)
		}
	}
	return c.gatherRanges(acc, out, true)
}
