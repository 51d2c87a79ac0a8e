package collectives

import (
	"fmt"
	"math"

	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// ssarSplitAllgather is SparCML's SSAR split-allgather. The index space is
// cut into P ranges (c.bounds), rank i owning range i.
//
//  1. Sparse reduce-scatter: every rank sends each owner the slice of its
//     input in the owner's range, directly (P-1 messages, posted at once,
//     rank+1 first so no owner is hit by everyone at the same moment).
//  2. Each owner sums the P slices of its range in rank order
//     (sparse.SumAll; dense if the union passes the rule).
//  3. Bruck allgather of the P reduced ranges, each in whichever encoding
//     is smaller; every rank concatenates them.
//
// Messages: P-1 + ceil(log2 P). Bytes sent per rank: about k*c*(P-1)/P in
// step 1 and K*c*(P-1)/P in step 3 (K the result's entries), each range
// capped at its dense size.
//
// With a lossy codec (c.q) each piece of step 1 is quantized once by its
// sender, the owner decodes and sums in T (its own slice exact), and in
// step 3 the owner quantizes its reduced range once: the allgather
// forwards those bytes unchanged, and the owner replaces its range with
// their decoding too, so the result is bit-identical everywhere with two
// quantizations per contribution path.
func ssarSplitAllgather[T Float](c *spCall[T], out *sparse.Vector[T], denseOut bool) error {
	parts, err := c.scatterToOwners()
	if err != nil {
		return err
	}
	red := c.vector()
	if err := sparse.SumAll(red, parts); err != nil {
		return c.op.Fail(err)
	}
	transport.Work(c.op.T, transport.KernelMerge, entryBytes(parts))
	return c.gatherRanges(red, out, denseOut)
}

// scatterToOwners is the reduce-scatter's communication: it sends every
// owner its range of the input and returns the P slices of this rank's own
// range, parts[q] from rank q, as vectors of the range's length. When the
// counts exchange carried them (sparse_agree_carry.go) it sends nothing.
func (c *spCall[T]) scatterToOwners() ([]*sparse.Vector[T], error) {
	if c.carried != nil {
		return c.carriedParts()
	}
	lo, hi := c.bounds[c.rank], c.bounds[c.rank+1]
	own := c.ownSlice(lo, hi)

	// All outgoing slices go into one buffer, sent piece by piece.
	buf := c.sc.get(c.compactSize(c.in.NNZ(), c.in.Dim) + c.p*sparse.BlockHeaderSize)[:0]
	start, end := make([]int, c.p), make([]int, c.p)
	for i := 1; i < c.p; i++ {
		q := (c.rank + i) % c.p
		start[q] = len(buf)
		var err error
		if buf, err = c.encode(buf, c.in, c.bounds[q], c.bounds[q+1]); err != nil {
			return nil, err
		}
		end[q] = len(buf)
	}
	c.sc.keep(buf)

	reqs := make([]*transport.Request, c.p)
	guess := c.compactSize(own.NNZ(), hi-lo)
	for q := range c.p {
		if q != c.rank {
			reqs[q] = c.recv(q, spStepScatter, guess)
		}
	}
	sends := make([]*transport.Request, 0, c.p-1)
	for i := 1; i < c.p; i++ {
		q := (c.rank + i) % c.p
		sends = append(sends, c.op.Send(q, spStepScatter, buf[start[q]:end[q]]))
	}
	parts := make([]*sparse.Vector[T], c.p)
	parts[c.rank] = own
	for q, r := range reqs {
		if r == nil {
			continue
		}
		msg, err := c.data(r)
		if err != nil {
			return nil, err
		}
		if parts[q], err = c.received(msg, q, hi-lo); err != nil {
			return nil, err
		}
	}
	if err := c.op.Wait(sends...); err != nil {
		return nil, err
	}
	return parts, nil
}

// ownSlice returns this rank's input restricted to [lo, hi) as a vector of
// dimension hi-lo: a view of a dense input, a rebased copy of a sparse one.
func (c *spCall[T]) ownSlice(lo, hi int) *sparse.Vector[T] {
	bl := c.in.BlockLen()
	if c.in.Dense {
		return &sparse.Vector[T]{Dim: hi - lo, Dense: true, Block: c.in.Block, Values: c.in.Values[lo*bl : hi*bl]}
	}
	a, b := c.in.RangeBounds(lo, hi)
	v := c.vector()
	v.Dim, v.Block = hi-lo, c.in.Block
	for i := a; i < b; i++ {
		v.Indices = append(v.Indices, c.in.Indices[i]-uint32(lo))
	}
	v.Values = append(v.Values, c.in.Values[a*bl:b*bl]...)
	return v
}

// gatherRanges allgathers the reduced ranges (red is this rank's) and
// writes their concatenation into out: dense when asked or when the total
// of the ranges' entries passes the rule, else sparse.
func (c *spCall[T]) gatherRanges(red, out *sparse.Vector[T], denseOut bool) error {
	enc, err := c.encode(c.sc.get(c.compactSize(red.NNZ(), red.Dim))[:0], red, 0, red.Dim)
	if err != nil {
		return err
	}
	c.sc.keep(enc)
	blobs, err := spAllgatherBlobs(c.op, &c.sc, spStepGather, enc, sparse.EncodedLen)
	if err != nil {
		return err
	}
	dim, total := c.in.Dim, 0
	for q, b := range blobs {
		d, nnz, _, err := sparse.Peek(b)
		if err != nil || d != c.bounds[q+1]-c.bounds[q] {
			return c.op.Fail(fmt.Errorf("%w: range %d of rank %d: dimension %d, expected %d (%v)",
				transport.ErrProtocol, q, c.op.commRank(q), d, c.bounds[q+1]-c.bounds[q], err))
		}
		total += nnz
	}
	dense := denseOut || sparse.PreferDense(total, dim, c.es)
	out.Reset(dim)
	out.Block = c.in.Block
	bl := c.in.BlockLen()
	room := total
	if dense {
		out.Dense, room = true, dim
	}
	if cap(out.Values) < room*bl {
		out.Values = make([]T, 0, room*bl)
	}
	if !dense && cap(out.Indices) < room {
		out.Indices = make([]uint32, 0, room)
	}
	if dense {
		out.Values = out.Values[:dim*bl]
	}
	return c.appendRanges(out, red, blobs)
}

// appendRanges writes the reduced ranges into out (sized: dense Values of
// the full dimension, or empty sparse), each decoded straight from the
// received bytes into place. With exact values this rank's range comes
// from red; with a lossy codec the owner too takes the decoding of the
// bytes it sent, so that every rank holds the same bits.
func (c *spCall[T]) appendRanges(out, red *sparse.Vector[T], blobs [][]byte) error {
	for q, b := range blobs {
		lo := c.bounds[q]
		var err error
		switch {
		case c.q == nil && q == c.rank && out.Dense:
			bl := out.BlockLen()
			red.ToDense(out.Values[lo*bl : c.bounds[q+1]*bl])
		case c.q == nil && q == c.rank:
			spAppendRange(out, red, lo)
		case c.q == nil:
			_, err = out.DecodeAt(b, lo)
		case q == c.rank:
			// Own bytes: the exact indices are red's.
			_, err = out.DecodeQuantOwnAt(b, lo, c.q, red)
		default:
			_, err = out.DecodeQuantAt(b, lo, c.q)
		}
		if err != nil {
			return c.op.Fail(fmt.Errorf("%w: rank %d sent a bad range: %w", transport.ErrProtocol, c.op.commRank(q), err))
		}
		if q != c.rank {
			c.codecWork(c.decodedBytes(b))
		}
	}
	return nil
}

// decodedBytes is what decoding message b costs in memory: its wire size
// with exact values, its entries with a lossy codec (sparse.Peek read it
// before).
func (c *spCall[T]) decodedBytes(b []byte) int {
	if c.q == nil {
		return len(b)
	}
	d, nnz, dense, _ := sparse.Peek(b)
	if dense {
		return d * sparse.ValueSize[T]()
	}
	return nnz * (sparse.IndexSize + sparse.ValueSize[T]())
}

// spAppendRange appends range vector v, which starts at index lo, to the
// sparse vector out: v's entries shifted by lo, a dense range contributing
// every position (a dense block range its rows that hold a nonzero value,
// as DecodeAt adds a received one).
func spAppendRange[T Float](out, v *sparse.Vector[T], lo int) {
	if v.Dense && v.IsBlock() {
		sparse.AppendNonzeroRows(out, v.Values, lo)
		return
	}
	if v.Dense {
		for i, x := range v.Values {
			out.Indices = append(out.Indices, uint32(lo+i))
			out.Values = append(out.Values, x)
		}
		return
	}
	for _, x := range v.Indices {
		out.Indices = append(out.Indices, x+uint32(lo))
	}
	out.Values = append(out.Values, v.Values...)
}

// planScatterToOwners is scatterToOwners' phase for the cost model: every
// rank sends each owner its slice, whose in-memory bytes the owner
// reduces reduce times. It returns, per owner, whether a piece arrived
// dense (the owner's sum of its range is then dense in memory).
func planScatterToOwners(pl *spPlan, p int, w spWire, sup spSupports, bounds []int, reduce float64) []bool {
	if u, ok := sup.(spUniform); ok {
		return planScatterUniform(pl, p, w, u, bounds, reduce)
	}
	gotDense := make([]bool, p)
	for r := range p {
		for q := range p {
			if q != r {
				n := bounds[q+1] - bounds[q]
				k := sup.count(r, bounds[q], bounds[q+1])
				idx := spIdx(w, sup, []int{r}, bounds[q], bounds[q+1])
				b, dense := w.msg(k, n, idx, false)
				gotDense[q] = gotDense[q] || dense
				pl.msg(r, q, b, w.mem(k, n, b, dense), reduce)
				pl.indexCodec(r, q, w.codecSecs(k, n, idx, false))
			}
		}
	}
	pl.endPhase()
	return gotDense
}

// planSSARSplitAllgather is ssarSplitAllgather's schedule for the cost
// model: the scatter to owners, whose P slices sparse.SumAll sums (see
// mergePasses), then the Bruck allgather of the reduced ranges, each the
// size of the union of the supports over its range in its smaller
// encoding.
func planSSARSplitAllgather(pl *spPlan, p, dim int, w spWire, sup spSupports, bounds []int) {
	k := 0.0
	for r := range p {
		k += sup.count(r, 0, dim)
	}
	gotDense := planScatterToOwners(pl, p, w, sup, bounds, mergePasses(k, dim, p))
	all := spAllRanks(p)
	size, mem, codec := make([]float64, p), make([]float64, p), make([]float64, p)
	for q := range p {
		n := bounds[q+1] - bounds[q]
		union := sup.union(all, bounds[q], bounds[q+1])
		memDense := gotDense[q] || sparse.PreferDense(int(math.Round(union)), n, w.s)
		idx := spIdx(w, sup, all, bounds[q], bounds[q+1])
		var dense bool
		size[q], dense = w.msg(union, n, idx, memDense)
		mem[q] = w.mem(union, n, size[q], dense)
		codec[q] = w.codecSecs(union, n, idx, memDense)
	}
	pl.bruck(size, mem, codec, 0)
}
