package collectives

import (
	"fmt"

	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// allgatherAllreduce is the baseline Horovod and PyTorch's Gloo backend
// use for sparse gradients: allgather every rank's entries (Bruck,
// ceil(log2 P) messages), then let every rank sum all P vectors locally
// (a k-way merge in rank order, so all ranks get the same bits).
//
// Bytes sent per rank: the other ranks' encoded inputs, k*c*(P-1) for
// equal counts: linear in P, which is why it loses at scale.
func allgatherAllreduce[T Float](c *spCall[T], out *sparse.Vector[T], denseOut bool) error {
	parts, err := c.allgatherInputs()
	if err != nil {
		return err
	}
	// Sum straight into out unless a dense copy is asked for anyway.
	res := out
	if denseOut {
		res = c.vector()
	}
	if err := sparse.SumAll(res, parts); err != nil {
		return c.op.Fail(err)
	}
	transport.Work(c.op.T, transport.KernelMerge, entryBytes(parts))
	if denseOut {
		c.finish(out, res, true)
	}
	return nil
}

// allgatherInputs gathers every rank's input, each in the smaller
// encoding; parts[c.rank] is the input itself, or with a lossy codec the
// decoding of the bytes this rank sent (each input is quantized once, by
// its rank, and every rank then sums the same values).
func (c *spCall[T]) allgatherInputs() ([]*sparse.Vector[T], error) {
	enc, err := c.encode(c.sc.get(c.compactSize(c.in.NNZ(), c.in.Dim))[:0], c.in, 0, c.in.Dim)
	if err != nil {
		return nil, err
	}
	c.sc.keep(enc)
	blobs, err := spAllgatherBlobs(c.op, &c.sc, spStepGather, enc, sparse.EncodedLen)
	if err != nil {
		return nil, err
	}
	parts := make([]*sparse.Vector[T], c.p)
	for q, b := range blobs {
		if q == c.rank && c.q == nil {
			parts[q] = c.in
			continue
		}
		if parts[q], err = c.received(b, q, c.in.Dim); err != nil {
			return nil, err
		}
	}
	return parts, nil
}

// SparseAllgather gives every rank every rank's vector: on return
// out[r] holds rank r's in, in whichever form is smaller. The vectors of
// out are reused (nil entries and a short slice are allocated), so a
// caller that keeps out does not allocate in steady state. Every rank must
// pass the same dimension; in must be valid, or the operation fails on
// every rank.
func SparseAllgather[T Float](op *Op, in *sparse.Vector[T], out []*sparse.Vector[T]) ([]*sparse.Vector[T], error) {
	return SparseAllgatherWith(op, in, out, SparseAllgatherOptions{})
}

// SparseAllgatherOptions tunes SparseAllgatherWith. Every rank must pass
// the same Quant (the descriptor names it, so a mismatch fails with
// ErrMismatch on every rank).
type SparseAllgatherOptions struct {
	// Quant is the value codec on the wire (see SparseOptions.Quant);
	// quant.None sends exact values.
	Quant quant.Kind
	// QuantSeed seeds a stochastic codec: different on every rank and call.
	QuantSeed uint64
}

// SparseAllgatherWith is SparseAllgather with options. With a lossy codec
// each rank's vector is quantized once, by its rank, and every rank,
// that one included, receives the decoding of the same bytes: out is
// bit-identical on every rank, each vector within one quantization of
// the input (indices exact). With one rank nothing is quantized.
func SparseAllgatherWith[T Float](op *Op, in *sparse.Vector[T], out []*sparse.Vector[T], opts SparseAllgatherOptions) ([]*sparse.Vector[T], error) {
	if err := sparseCheckOp(op); err != nil {
		return out, err
	}
	op.Desc = spDesc[T](transport.OpSparseAllgather, Sum, opts.Quant, AlgoDirect)
	if !opts.Quant.Valid() {
		return out, sparseFailInvalid(op, "unknown value codec %v", opts.Quant)
	}
	if in == nil {
		return out, sparseFailInvalid(op, "SparseAllgather needs an input vector")
	}
	op.Desc.Count = uint64(in.Dim)
	op.Desc.Root = spBlockDesc(in)
	if err := in.Validate(); err != nil {
		return out, op.Fail(fmt.Errorf("%w: input of rank %d: %w", transport.ErrInvalid, op.commRank(op.Rank()), err))
	}
	if in.IsBlock() && !opts.Quant.Lossless() {
		return out, sparseFailInvalid(op, "a block vector travels exact: the lossy codec %v does not take rows", opts.Quant)
	}
	c := newSpCall(op, in)
	parts := []*sparse.Vector[T]{in}
	if c.p > 1 {
		if err := c.setQuant(opts.Quant, opts.QuantSeed); err != nil {
			return out, err
		}
		var err error
		if parts, err = c.allgatherInputs(); err != nil {
			c.sc.abandon()
			return out, err
		}
	}
	for len(out) < c.p {
		out = append(out, nil)
	}
	out = out[:c.p]
	for q, v := range parts {
		if out[q] == nil {
			out[q] = &sparse.Vector[T]{}
		}
		c.finish(out[q], v, false)
	}
	c.sc.release()
	return out, nil
}

// planSparseAllgather is allgatherAllreduce's schedule for the cost model:
// the Bruck allgather of every rank's input in its smaller encoding, every
// received in-memory byte merged (see mergePasses). Every rank also sums
// its own input and, with a lossy codec, first decodes its own bytes (so
// that every rank sums the same values): charged with the phase.
func planSparseAllgather(pl *spPlan, p, dim int, w spWire, sup spSupports) {
	size, mem, codec := make([]float64, p), make([]float64, p), make([]float64, p)
	for r := range p {
		k := sup.count(r, 0, dim)
		idx := spIdx(w, sup, []int{r}, 0, dim)
		var dense bool
		size[r], dense = w.msg(k, dim, idx, false)
		mem[r] = w.mem(k, dim, size[r], dense)
		codec[r] = w.codecSecs(k, dim, idx, false)
	}
	k := 0.0
	for r := range p {
		k += sup.count(r, 0, dim)
	}
	merge := mergePasses(k, dim, p)
	for r := range p {
		pl.red[r] += mem[r] * merge
		if w.lossy() {
			pl.memRecv[r] += mem[r]
		}
	}
	pl.bruck(size, mem, codec, merge)
}
