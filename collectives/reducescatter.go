package collectives

import (
	"github.com/sparcml/sparcml/transport"
)

// ReduceScatter reduces in element-wise with red across all ranks and
// leaves block r of the result in rank r's out (NCCL semantics): in holds P
// blocks of len(out) elements. in is not modified, except that out may be
// rank r's block of in itself (in place). algo must be AlgoAuto or AlgoRing.
func ReduceScatter[T Float](op *Op, in []T, out []T, red ReduceOp, algo Algo) error {
	return reduceScatter(op, in, out, red, algo, segmentElems[T](op))
}

func reduceScatter[T Float](op *Op, in []T, out []T, red ReduceOp, algo Algo, seg int) error {
	if err := checkOp(op); err != nil {
		return err
	}
	if algo == AlgoAuto {
		algo = AlgoRing
	}
	setDesc[T](op, transport.OpReduceScatter, red, algo, 0, len(in))
	p, r := op.Size(), op.Rank()
	switch {
	case !validReduce(red):
		return failInvalid(op, "unknown reduction %v", red)
	case algo != AlgoRing && algo != AlgoHierarchical:
		return failInvalid(op, "reduce-scatter supports the ring and hierarchical algorithms, not %v", algo)
	case len(in) != p*len(out):
		return failInvalid(op, "reduce-scatter: len(in) = %d, want %d ranks x len(out) %d", len(in), p, len(out))
	}
	m := len(out)
	inPlace := sameSlice(out, in[r*m:(r+1)*m])
	if !inPlace && overlaps(in, out) {
		return failInvalid(op, "reduce-scatter: out overlaps in other than as this rank's block")
	}
	if p == 1 {
		copy(out, in)
		return nil
	}
	if len(in) == 0 {
		return dissemination(op)
	}
	if algo == AlgoHierarchical {
		return hierarchicalReduceScatter(op, in, out, red, seg)
	}
	return ringReduceScatter(op, in, out, red, inPlace, seg)
}

// ringReduceScatter runs ReduceScatter's ring: the reduce-scatter stage
// alone, leaving block r on rank r.
func ringReduceScatter[T Float](op *Op, in, out []T, red ReduceOp, inPlace bool, seg int) error {
	rg := newRing(op, len(in), seg)
	items := (op.Size() - 1) * rg.nseg
	ahead := ringAhead(rg, items)
	stage := newReduceScatterStage(op, rg, in, out, op.Rank(), red, inPlace, ahead)
	if err := runRing(op, rg, items, ahead, stage); err != nil {
		return err // scratch is dropped: a failed receive may still be landing in it
	}
	stage.release()
	return nil
}

// reduceScatterStage is the reduce-scatter of the ring, shared by
// ReduceScatter and the ring allreduce (which follows it with the ring
// allgather in the same item stream). It never writes in except through
// out. Item i (ring step t = i/nseg, segment j = i%nseg) receives from r-1
// the partial result of segment j of block (own-t-2), reduces this rank's
// contribution from in into it and, unless t is the last step (P-2), sends
// the very same slot on to r+1 as item i+nseg: partial results never cost a
// copy. At the last step the block is own and the result lands in out. The
// first step sends this rank's contribution to block own-1 straight from in.
//
// A slot is reused only once its forwarding send has completed; the stage
// has pipelineDepth more slots than the stream keeps receives posted, so
// that this rarely waits.
type reduceScatterStage[T Float] struct {
	op      *Op
	rg      ring
	in      []T
	out     []T // the result, block own of in's layout
	outLo   int // where out starts in in's layout
	own     int // the block this rank ends with
	red     ReduceOp
	inPlace bool // out is block own of in itself
	items   int  // (P-1)*nseg
	// Partial results land in nslots slots of slotBytes each in scratch.
	nslots    int
	slotBytes int
	scratch   []byte
}

// newReduceScatterStage prepares the reduce-scatter of in over the ring rg
// leaving block own in out, for a stream that keeps ahead receives posted.
func newReduceScatterStage[T Float](op *Op, rg ring, in, out []T, own int, red ReduceOp, inPlace bool, ahead int) *reduceScatterStage[T] {
	items := (op.Size() - 1) * rg.nseg
	// More slots than items would never be used.
	nslots := min(ahead+min(pipelineDepth, rg.nseg), items)
	slotBytes := rg.slotElems * elemSize[T]()
	return &reduceScatterStage[T]{
		op:        op,
		rg:        rg,
		in:        in,
		out:       out,
		outLo:     rg.blocks.start(own),
		own:       own,
		red:       red,
		inPlace:   inPlace,
		items:     items,
		nslots:    nslots,
		slotBytes: slotBytes,
		scratch:   op.Pool.Get(nslots * slotBytes),
	}
}

// release returns the scratch to the pool; only after a successful run, as
// a failed receive may still be landing in it.
func (s *reduceScatterStage[T]) release() { s.op.Pool.Put(s.scratch) }

// recvSegment returns the bounds in in of the segment item i receives.
func (s *reduceScatterStage[T]) recvSegment(i int) (lo, hi int) {
	return s.rg.segment(mod(s.own-i/s.rg.nseg-2, s.op.Size()), i%s.rg.nseg)
}

// final reports whether item i belongs to the last step, whose block is own.
func (s *reduceScatterStage[T]) final(i int) bool { return i/s.rg.nseg == s.op.Size()-2 }

// slot returns the first elems elements' worth of item i's slot.
func (s *reduceScatterStage[T]) slot(i, elems int) []byte {
	off := (i % s.nslots) * s.slotBytes
	end := off + elems*elemSize[T]()
	return s.scratch[off:end:end]
}

// outSegment returns the part of out that holds in[lo:hi].
func (s *reduceScatterStage[T]) outSegment(lo, hi int) []T {
	return s.out[lo-s.outLo : hi-s.outLo : hi-s.outLo]
}

func (s *reduceScatterStage[T]) recvBuffer(i int) (buf []byte, after int) {
	lo, hi := s.recvSegment(i)
	if s.final(i) && !s.inPlace {
		return AsBytes(s.outSegment(lo, hi)), -1
	}
	after = -1
	if prev := i - s.nslots; prev >= 0 && !s.final(prev) {
		after = prev + s.rg.nseg // the send that forwards the slot's last item
	}
	return s.slot(i, hi-lo), after
}

func (s *reduceScatterStage[T]) sendBuffer(i int) []byte {
	if i < s.rg.nseg {
		lo, hi := s.rg.segment(mod(s.own-1, s.op.Size()), i)
		return AsBytes(s.in[lo:hi])
	}
	lo, hi := s.recvSegment(i - s.rg.nseg)
	return s.slot(i-s.rg.nseg, hi-lo)
}

// arrive adds this rank's contribution to the partial result item i just
// received: in its slot, or in out at the last step, where the segment is
// complete and an Avg divides it (cache-hot, and before the ring
// allreduce forwards it: each rank divides only its own block).
func (s *reduceScatterStage[T]) arrive(i int, payload []byte) error {
	lo, hi := s.recvSegment(i)
	want := (hi - lo) * elemSize[T]()
	if len(payload) != want {
		return failSize(s.op, s.rg.left, len(payload), want)
	}
	switch {
	case s.final(i) && s.inPlace:
		// out already holds this rank's block of in.
		dst := s.outSegment(lo, hi)
		ReduceInto(s.red, dst, FromBytes[T](payload))
		finishReduce(s.red, dst, s.op.Size())
	case s.final(i):
		dst := s.outSegment(lo, hi)
		if err := received(s.op, s.rg.left, payload, dst); err != nil {
			return err
		}
		ReduceInto(s.red, dst, s.in[lo:hi])
		finishReduce(s.red, dst, s.op.Size())
	default:
		slot := s.slot(i, hi-lo)
		if len(slot) > 0 && &payload[0] != &slot[0] {
			copy(slot, payload)
		}
		ReduceInto(s.red, FromBytes[T](slot), s.in[lo:hi])
	}
	transport.Work(s.op.T, transport.KernelReduce, want)
	return nil
}
