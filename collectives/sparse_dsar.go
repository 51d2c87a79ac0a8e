package collectives

import (
	"math"

	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
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
	dim, bl := c.in.Dim, c.in.BlockLen()
	out.Reset(dim)
	out.Dense, out.Block = true, c.in.Block
	out.Values = out.Values[:0]
	if cap(out.Values) < dim*bl {
		out.Values = make([]T, 0, dim*bl)
	}
	out.Values = out.Values[:dim*bl]
	// The other blocks' receives are posted before the reduce-scatter, so
	// that a neighbour that finishes its range first sends it straight
	// into place rather than as unexpected messages to copy. The ranges
	// are of rows; the blocks of the layout are of values.
	offs := c.bounds
	if bl > 1 {
		offs = make([]int, len(c.bounds))
		for i, b := range c.bounds {
			offs[i] = b * bl
		}
	}
	l := layout{n: dim * bl, k: c.p, offs: offs}
	gather := postRingAllgather(c.op, out.Values, l, c.rank, spStepDenseGather, segmentElems[T](c.op))
	parts, err := c.scatterToOwners()
	if err != nil {
		return err
	}
	acc := out.Values[c.bounds[c.rank]*bl : c.bounds[c.rank+1]*bl]
	clear(acc)
	// In rank order, window by window (sparse.AddAllTo), so every
	// element's sum is the same on every rank.
	if err := sparse.AddAllTo(acc, parts); err != nil {
		return c.op.Fail(err)
	}
	transport.Work(c.op.T, transport.KernelReduce, entryBytes(parts))
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
	transport.Work(c.op.T, transport.KernelReduce, entryBytes(parts))
	return c.gatherRanges(acc, out, true)
}

// planDSAR is dsarAllreduce's schedule for the cost model: the scatter to
// owners, whose scatter-adds (sparse.AddAllTo) cost about what a dense
// add does per byte and so are charged at Gamma rather than the merge's
// SparseGamma, then the ring allgather of the dense blocks in place
// (exact values) or, with a lossy codec, the Bruck allgather of the
// quantized ranges (dsarQuantized).
func planDSAR(pl *spPlan, p int, w spWire, sup spSupports, bounds []int) {
	reduce := 1.0
	if sg := pl.m.sparseGamma(); sg > 0 {
		reduce = pl.m.Gamma / sg
	}
	planScatterToOwners(pl, p, w, sup, bounds, reduce)
	size, mem := make([]float64, p), make([]float64, p)
	for q := range p {
		n := bounds[q+1] - bounds[q]
		size[q], _ = w.msg(float64(n), n, 0, true)
		mem[q] = w.mem(float64(n), n, size[q], true)
		if !w.lossy() {
			size[q] = float64(n * w.s) // raw blocks, no header (denseRing takes no mem)
		}
	}
	if w.lossy() {
		pl.bruck(size, mem, nil, 0)
	} else {
		pl.denseRing(size)
	}
}

// denseRing adds a ring allgather of dense blocks of the given byte
// sizes, received in place (exact DSAR's last phase): rank r forwards
// every block but its right neighbour's, one message per segment (at
// least one per block), with no encoding to charge. Each rank's total is
// that of all blocks less one, O(P) rather than its P-1 steps each.
func (pl *spPlan) denseRing(size []float64) {
	p := len(size)
	total, segs := 0.0, make([]int, p)
	allSegs := 0
	for q, b := range size {
		total += b
		segs[q] = max(1, int(math.Ceil(b/segmentBytes)))
		allSegs += segs[q]
	}
	for r := range p {
		right := (r + 1) % p
		b := total - size[right]
		pl.sent[r] += b
		pl.memSent[r] += b
		pl.recv[right] += b
		pl.memRecv[right] += b
		pl.phaseMsgs[r] += allSegs - segs[right]
	}
	pl.raw = true
	pl.rounds = p - 1 // each step forwards the block the one before brought
	pl.endPhase()
}
