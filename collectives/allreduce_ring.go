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
// The whole schedule is one stream of 2(P-1)*nseg items, run by runRing.
// Item i belongs to ring step t = i / nseg and segment j = i % nseg. At item
// i rank r sends segment j of block (r-t) mod P to r+1 and receives segment
// j of block (r-t-1) mod P from r-1, tagged with step i. The reduce-scatter
// (t < P-1) is ReduceScatter's own (reduceScatterStage) with data as both
// its input and, for block r+1, its output: partial results travel in pool
// slots and after step P-2 rank r holds the full result of block r+1 in
// data. During the allgather (t >= P-1) segments land directly in data
// (zero copy). Either way the segment just received is the one sent at item
// i+nseg, so each rank forwards a segment as soon as it has it.

// ringAllreduce runs the ring allreduce on P >= 2 ranks with segments of at
// most seg elements.
//
// Receives are posted a block and a few segments ahead (ringAhead): the
// segment a rank forwards at item i+nseg is the one it received at item i,
// so its right neighbour, which runs at about the same item, must already
// have item i+nseg posted for the segment to land without an unexpected
// message copy.
func ringAllreduce[T Float](op *Op, data []T, red ReduceOp, seg int) error {
	p, r := op.Size(), op.Rank()
	rg := newRing(op, len(data), seg)
	items := 2 * (p - 1) * rg.nseg
	ahead := ringAhead(rg, items)
	own := mod(r+1, p)
	lo, hi := rg.blocks.block(own)
	plan := &ringAllreducePlan[T]{
		stage:    newReduceScatterStage(op, rg, data, data[lo:hi], own, red, true, ahead),
		data:     data,
		reducing: (p - 1) * rg.nseg,
	}
	if err := runRing(op, rg, items, ahead, plan); err != nil {
		return err // scratch is dropped: a failed receive may still be landing in it
	}
	plan.stage.release()
	return nil
}

// ringAllreducePlan is the ring allreduce's item stream: the reduce-scatter
// stage for the first reducing items, then the allgather of data.
type ringAllreducePlan[T Float] struct {
	stage    *reduceScatterStage[T]
	data     []T
	reducing int // items before this one are reduce-scatter
}

// gathered returns the bounds in data of the segment allgather item i
// receives; the one it sends is the segment received nseg items earlier.
func (a *ringAllreducePlan[T]) gathered(i int) (lo, hi int) {
	rg := a.stage.rg
	return rg.segment(mod(a.stage.op.Rank()-i/rg.nseg-1, a.stage.op.Size()), i%rg.nseg)
}

func (a *ringAllreducePlan[T]) recvBuffer(i int) (buf []byte, after int) {
	if i < a.reducing {
		return a.stage.recvBuffer(i)
	}
	// A gathered segment overwrites the region that the reduce-scatter
	// used at the item (P-1)*nseg earlier: at the first step that item's
	// send reads it; later, the region is read as this rank's contribution
	// before that item's send starts. Either way the send's completion
	// makes the region free.
	lo, hi := a.gathered(i)
	return AsBytes(a.data[lo:hi:hi]), i - a.reducing
}

func (a *ringAllreducePlan[T]) sendBuffer(i int) []byte {
	if i < a.reducing {
		return a.stage.sendBuffer(i)
	}
	lo, hi := a.gathered(i - a.stage.rg.nseg)
	return AsBytes(a.data[lo:hi])
}

func (a *ringAllreducePlan[T]) arrive(i int, payload []byte) error {
	if i < a.reducing {
		return a.stage.arrive(i, payload)
	}
	lo, hi := a.gathered(i)
	return received(a.stage.op, a.stage.rg.left, payload, a.data[lo:hi])
}

// ringPlan says, item by item, what a ring stream receives, sends and does
// with what arrives.
type ringPlan interface {
	// recvBuffer returns where item i is received and the item whose send
	// must have completed before that buffer may be written (-1 if none).
	recvBuffer(i int) (buf []byte, after int)
	// sendBuffer returns what item i sends. It is called once item
	// i-nseg has arrived (or, for the first nseg items, at the start).
	sendBuffer(i int) []byte
	// arrive handles item i's payload.
	arrive(i int, payload []byte) error
}

// runRing runs a stream of items around the ring rg: item i is received
// from the left neighbour and sent to the right one with step i, and the
// send of item i+nseg starts as soon as item i has arrived, since it
// forwards what item i brought. Receives are posted ahead items in advance;
// one whose buffer is still being sent from is posted later, waiting for
// that send only when its item is the next to arrive.
func runRing(op *Op, rg ring, items, ahead int, plan ringPlan) error {
	recvs := make([]*transport.Request, ahead) // item i in recvs[i%ahead]
	sends := make([]*transport.Request, items)
	posted := 0
	// postUntil posts the receives of items [posted, limit) in order. When
	// a buffer's send has not completed, it waits if must is set and
	// otherwise stops for now.
	postUntil := func(limit int, must bool) error {
		for ; posted < limit; posted++ {
			buf, after := plan.recvBuffer(posted)
			if after >= 0 {
				if !must && !completed(sends[after]) {
					return nil
				}
				if err := op.Wait(sends[after]); err != nil {
					return err
				}
			}
			recvs[posted%ahead] = op.Recv(rg.left, uint32(posted), buf)
		}
		return nil
	}
	start := func(i int) {
		sends[i] = op.Send(rg.right, uint32(i), plan.sendBuffer(i))
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
		payload, err := op.WaitData(recvs[i%ahead])
		if err != nil {
			return err
		}
		if err := plan.arrive(i, payload); err != nil {
			return err
		}
		if i+rg.nseg < items {
			start(i + rg.nseg)
		}
		if err := postUntil(min(i+1+ahead, items), false); err != nil {
			return err
		}
	}
	return op.Wait(sends...)
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
