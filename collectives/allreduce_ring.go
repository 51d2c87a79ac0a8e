package collectives

import (
	"github.com/sparcml/sparcml/transport"
)

// Ring allreduce: a reduce-scatter followed by an allgather around the ring
// r -> r+1, the bandwidth-optimal schedule (each rank sends 2(P-1)/P of the
// vector). The vector is cut into P blocks and every block into nseg
// segments; each segment is its own message, so the reduction of one
// segment overlaps the transfer of the next and no message exceeds
// segmentBytes.
//
// The whole schedule is one stream of 2(P-1)*nseg items. Item i belongs to
// ring step t = i / nseg and segment j = i % nseg. At item i rank r sends
// segment j of block (r-t) mod P to r+1 and receives segment j of block
// (r-t-1) mod P from r-1, tagged with step i. During the reduce-scatter
// (t < P-1) the received segment lands in a pool slot and is reduced into
// data; after step P-2 rank r holds the full result of block r+1. During
// the allgather (t >= P-1) it lands directly in data (zero copy). Either
// way the segment just received is the one sent at item i+nseg, so each
// rank forwards a segment as soon as it has it.

// ringAllreduce runs the ring allreduce on P >= 2 ranks with segments of at
// most seg elements.
//
// Receives are posted a block and a few segments ahead (ringAhead): the
// segment a rank forwards at item i+nseg is the one it received at item i,
// so its right neighbour, which runs at about the same item, must already
// have item i+nseg posted for the segment to land without an unexpected
// message copy. Reduce-scatter items land in that many pool slots (one
// block plus pipelineDepth segments of scratch).
func ringAllreduce[T Float](op *Op, data []T, red ReduceOp, seg int) error {
	p, r := op.Size(), op.Rank()
	rg := newRing(op, len(data), seg)
	items := 2 * (p - 1) * rg.nseg
	reducing := (p - 1) * rg.nseg // items before this one are reduce-scatter
	ahead := ringAhead(rg, items)
	slots := min(ahead, reducing)
	esz := elemSize[T]()
	slotBytes := rg.slotElems * esz
	scratch := op.Pool.Get(slots * slotBytes)

	recvs := make([]*transport.Request, ahead) // item i in recvs[i%ahead]
	sends := make([]*transport.Request, items)
	posted := 0
	// postUntil posts the receives of items [posted, limit) in order. A
	// gathered segment overwrites a region this rank sent (P-1)*nseg items
	// earlier, so that send must have completed first: when it has not,
	// postUntil waits if must is set and otherwise stops for now.
	postUntil := func(limit int, must bool) error {
		for ; posted < limit; posted++ {
			i := posted
			lo, hi := rg.segment(mod(r-i/rg.nseg-1, p), i%rg.nseg)
			if i < reducing {
				off := (i % slots) * slotBytes
				n := (hi - lo) * esz
				recvs[i%ahead] = op.Recv(rg.left, uint32(i), scratch[off:off+n:off+n])
				continue
			}
			k := i - reducing
			if !must && !completed(sends[k]) {
				return nil
			}
			if err := op.Wait(sends[k]); err != nil {
				return err
			}
			recvs[i%ahead] = op.Recv(rg.left, uint32(i), AsBytes(data[lo:hi:hi]))
		}
		return nil
	}
	start := func(i int) {
		lo, hi := rg.segment(mod(r-i/rg.nseg, p), i%rg.nseg)
		sends[i] = op.Send(rg.right, uint32(i), AsBytes(data[lo:hi]))
	}

	if err := postUntil(ahead, false); err != nil {
		return err
	}
	for i := range rg.nseg {
		start(i) // the first step sends this rank's own data
	}
	for i := range items {
		if err := postUntil(i+1, true); err != nil {
			return err
		}
		lo, hi := rg.segment(mod(r-i/rg.nseg-1, p), i%rg.nseg)
		payload, err := op.WaitData(recvs[i%ahead])
		if err != nil {
			return err // scratch is dropped: a failed receive may still be landing in it
		}
		if i < reducing {
			if len(payload) != (hi-lo)*esz {
				return failSize(op, rg.left, len(payload), (hi-lo)*esz)
			}
			ReduceInto(red, data[lo:hi], FromBytes[T](payload))
		} else if err := received(op, rg.left, payload, data[lo:hi]); err != nil {
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

// ringAhead is how many receives the ring algorithms keep posted: a block
// (the distance between receiving a segment and the neighbour forwarding
// it) plus a few segments of slack.
func ringAhead(rg ring, items int) int {
	return min(rg.nseg+min(pipelineDepth, rg.nseg), items)
}

// completed reports whether req has been started and has completed
// (successfully or not).
func completed(req *transport.Request) bool {
	if req == nil {
		return false
	}
	done, _ := req.Test()
	return done
}

// ring is the geometry shared by the ring algorithms: neighbours, the
// blocks of the buffer and their segments.
type ring struct {
	left, right int
	blocks      layout
	nseg        int // segments per block, the same for every block
	slotElems   int // size of the largest segment
}

// newRing cuts n elements into balanced blocks, one per rank.
func newRing(op *Op, n, seg int) ring {
	return newRingLayout(op, balanced(n, op.Size()), seg)
}

// newRingLayout cuts every block of l into the same number of segments, so
// that every rank agrees on the number of messages whatever the block
// sizes; a block shorter than the others gets shorter (possibly empty)
// segments.
func newRingLayout(op *Op, l layout, seg int) ring {
	p, r := op.Size(), op.Rank()
	largest := l.largest()
	// Keep 2(P-1)*nseg step numbers within uint32.
	nseg := segmentsFor(largest, seg, (1<<31)/(2*p))
	return ring{
		left:      mod(r-1, p),
		right:     mod(r+1, p),
		blocks:    l,
		nseg:      nseg,
		slotElems: ceilDiv(largest, nseg),
	}
}

// segment returns the bounds of segment j of block b.
func (rg ring) segment(b, j int) (lo, hi int) {
	blo, bhi := rg.blocks.block(b)
	slo, shi := part(bhi-blo, rg.nseg, j)
	return blo + slo, blo + shi
}
