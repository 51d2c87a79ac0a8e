package collectives

import (
	"github.com/sparcml/sparcml/transport"
)

// ReduceScatter reduces in element-wise with red across all ranks and
// leaves block r of the result in rank r's out (NCCL semantics): in holds P
// blocks of len(out) elements. in is not modified, except that out may be
// rank r's block of in itself (in place). algo must be AlgoAuto or AlgoRing.
func ReduceScatter[T Float](op *Op, in []T, out []T, red ReduceOp, algo Algo) error {
	return reduceScatter(op, in, out, red, algo, segmentElems[T]())
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
	case algo != AlgoRing:
		return failInvalid(op, "reduce-scatter supports the ring algorithm, not %v", algo)
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
	return ringReduceScatter(op, in, out, red, inPlace, seg)
}

// ringReduceScatter runs the reduce-scatter half of the ring allreduce
// without touching in. Item i (ring step t = i/nseg, segment j) receives
// the partial result of segment j of block (r-t-2) from r-1, reduces this
// rank's own contribution into it and, unless t is the last step, sends
// the very same slot on to r+1 as item i+nseg: partial results never cost
// a copy. At the last step (t = P-2) the block is r's own and lands in out.
// Receives are posted a block and a few segments ahead, as in the
// allreduce; a slot is reused only once its forwarding send has completed,
// and pipelineDepth extra slots make that rarely wait.
func ringReduceScatter[T Float](op *Op, in, out []T, red ReduceOp, inPlace bool, seg int) error {
	p, r := op.Size(), op.Rank()
	m := len(out)
	rg := newRing(op, len(in), seg)
	items := (p - 1) * rg.nseg
	ahead := ringAhead(rg, items)
	nslots := ahead + min(pipelineDepth, rg.nseg)
	esz := elemSize[T]()
	slotBytes := rg.slotElems * esz
	scratch := op.Pool.Get(nslots * slotBytes)
	slot := func(i, elems int) []byte {
		off := (i % nslots) * slotBytes
		return scratch[off : off+elems*esz : off+elems*esz]
	}
	final := func(i int) bool { return i/rg.nseg == p-2 }
	// recvSegment is where item i's segment lives in in.
	recvSegment := func(i int) (lo, hi int) { return rg.segment(mod(r-i/rg.nseg-2, p), i%rg.nseg) }

	recvs := make([]*transport.Request, ahead) // item i in recvs[i%ahead]
	sends := make([]*transport.Request, items)
	posted := 0
	// postUntil posts the receives of items [posted, limit) in order; a
	// slot whose forwarding send is still running is waited for if must is
	// set, else posting stops for now.
	postUntil := func(limit int, must bool) error {
		for ; posted < limit; posted++ {
			i := posted
			lo, hi := recvSegment(i)
			if final(i) && !inPlace {
				recvs[i%ahead] = op.Recv(rg.left, uint32(i), AsBytes(out[lo-r*m:hi-r*m:hi-r*m]))
				continue
			}
			if prev := i - nslots; prev >= 0 && !final(prev) {
				forward := sends[prev+rg.nseg]
				if !must && !completed(forward) {
					return nil
				}
				if err := op.Wait(forward); err != nil {
					return err
				}
			}
			recvs[i%ahead] = op.Recv(rg.left, uint32(i), slot(i, hi-lo))
		}
		return nil
	}
	// start sends item i: this rank's own block (r-1) at the first step,
	// else the partial result received and completed as item i-nseg.
	start := func(i int) {
		if i < rg.nseg {
			lo, hi := rg.segment(mod(r-1, p), i)
			sends[i] = op.Send(rg.right, uint32(i), AsBytes(in[lo:hi]))
			return
		}
		lo, hi := recvSegment(i - rg.nseg)
		sends[i] = op.Send(rg.right, uint32(i), slot(i-rg.nseg, hi-lo))
	}

	if err := postUntil(ahead, false); err != nil {
		return err
	}
	for i := range rg.nseg {
		start(i)
	}
	for i := range items {
		if err := postUntil(i+1, true); err != nil {
			return err
		}
		lo, hi := recvSegment(i)
		payload, err := op.WaitData(recvs[i%ahead])
		if err != nil {
			return err // scratch is dropped: a failed receive may still be landing in it
		}
		if err := arriveReduceScatter(op, rg.left, payload, lo, hi, in, out, red, inPlace, final(i), slot(i, hi-lo)); err != nil {
			return err
		}
		if i+rg.nseg < items {
			start(i + rg.nseg)
		}
		if err := postUntil(min(i+1+ahead, items), false); err != nil {
			return err
		}
	}
	if err := op.Wait(sends...); err != nil {
		return err
	}
	op.Pool.Put(scratch)
	return nil
}

// arriveReduceScatter adds this rank's contribution in[lo:hi] to the
// partial result just received: in its slot, or in out at the last step.
func arriveReduceScatter[T Float](op *Op, peer int, payload []byte, lo, hi int, in, out []T, red ReduceOp,
	inPlace, final bool, slot []byte) error {
	r, m := op.Rank(), len(out)
	if len(payload) != len(slot) {
		return failSize(op, peer, len(payload), len(slot))
	}
	switch {
	case final && inPlace:
		// out already holds this rank's block of in.
		ReduceInto(red, out[lo-r*m:hi-r*m], FromBytes[T](payload))
	case final:
		dst := out[lo-r*m : hi-r*m]
		if err := received(op, peer, payload, dst); err != nil {
			return err
		}
		ReduceInto(red, dst, in[lo:hi])
	default:
		if len(slot) > 0 && &payload[0] != &slot[0] {
			copy(slot, payload)
		}
		ReduceInto(red, FromBytes[T](slot), in[lo:hi])
	}
	return nil
}
