package collectives

import (
	"unsafe"

	"github.com/sparcml/sparcml/transport"
)

// Allgather gathers every rank's in into out on every rank: out holds P
// blocks of len(in) elements, block r being rank r's in. in may be block r
// of out itself (in place). algo is AlgoRing, AlgoRecursiveDoubling
// (ceil(log2 P) rounds: recursive doubling on a power of two, Bruck's
// algorithm otherwise) or AlgoAuto (the logarithmic one up to 512 KiB in
// all, the ring beyond).
func Allgather[T Float](op *Op, in []T, out []T, algo Algo) error {
	return allgather(op, in, out, algo, segmentElems[T](op))
}

func allgather[T Float](op *Op, in []T, out []T, algo Algo, seg int) error {
	if err := checkOp(op); err != nil {
		return err
	}
	p := op.Size()
	algo = resolveAllgather(algo, len(out)*elemSize[T](), p)
	setDesc[T](op, transport.OpAllgather, Sum, algo, 0, len(out))
	if algo != AlgoHierarchical {
		if err := checkAllgatherAlgo(op, algo); err != nil {
			return err
		}
	}
	if len(out) != p*len(in) {
		return failInvalid(op, "allgather: len(out) = %d, want %d ranks x len(in) %d", len(out), p, len(in))
	}
	if algo == AlgoHierarchical {
		return hierarchicalAllgather(op, in, out, seg)
	}
	return allgatherLayout(op, in, out, balanced(len(out), p), algo, seg)
}

// Allgatherv is Allgather with per-rank lengths: counts[r] is rank r's
// len(in), the same slice on every rank, and out holds the blocks back to
// back (len(out) == sum of counts). in may be rank r's block of out.
func Allgatherv[T Float](op *Op, in []T, out []T, counts []int, algo Algo) error {
	return allgatherv(op, in, out, counts, algo, segmentElems[T](op))
}

func allgatherv[T Float](op *Op, in []T, out []T, counts []int, algo Algo, seg int) error {
	if err := checkOp(op); err != nil {
		return err
	}
	p, r := op.Size(), op.Rank()
	algo = resolveAllgather(algo, len(out)*elemSize[T](), p)
	setDesc[T](op, transport.OpAllgatherv, Sum, algo, 0, len(out))
	if err := checkAllgatherAlgo(op, algo); err != nil {
		return err
	}
	if len(counts) != p {
		return failInvalid(op, "allgatherv: %d counts for %d ranks", len(counts), p)
	}
	total := 0
	for i, c := range counts {
		if c < 0 {
			return failInvalid(op, "allgatherv: counts[%d] = %d is negative", i, c)
		}
		total += c
	}
	if counts[r] != len(in) || total != len(out) {
		return failInvalid(op, "allgatherv: len(in) = %d with counts[%d] = %d, len(out) = %d with counts summing to %d",
			len(in), r, counts[r], len(out), total)
	}
	return allgatherLayout(op, in, out, fromCounts(counts), algo, seg)
}

// allgatherRecursiveDoublingLimit is the largest output, in bytes, for which
// AlgoAuto picks the logarithmic algorithms over the ring (for long
// vectors the ring's neighbour-only traffic is kinder to real networks;
// MPICH switches at the same size).
const allgatherRecursiveDoublingLimit = 512 << 10

// resolveAllgather resolves AlgoAuto for Allgather and Allgatherv. The
// ring and the logarithmic algorithms send the same bytes, the latter in
// ceil(log2 P) rounds instead of P-1.
func resolveAllgather(algo Algo, bytes, p int) Algo {
	if algo != AlgoAuto {
		return algo
	}
	if bytes <= allgatherRecursiveDoublingLimit {
		return AlgoRecursiveDoubling
	}
	return AlgoRing
}

func checkAllgatherAlgo(op *Op, algo Algo) error {
	if algo == AlgoRing || algo == AlgoRecursiveDoubling {
		return nil
	}
	return failInvalid(op, "allgather supports %v and %v, not %v", AlgoRing, AlgoRecursiveDoubling, algo)
}

// allgatherLayout places in as this rank's block of out and runs algo.
func allgatherLayout[T Float](op *Op, in, out []T, l layout, algo Algo, seg int) error {
	lo, hi := l.block(op.Rank())
	mine := out[lo:hi]
	if !sameSlice(in, mine) {
		if overlaps(in, out) {
			return failInvalid(op, "in overlaps out other than as this rank's block")
		}
		copy(mine, in)
	}
	if op.Size() == 1 {
		return nil
	}
	if len(out) == 0 {
		return dissemination(op)
	}
	if algo == AlgoRecursiveDoubling {
		if p := op.Size(); p&(p-1) != 0 {
			return bruckAllgather(op, out, l, seg)
		}
		return recursiveDoublingAllgather(op, out, l, seg)
	}
	return ringAllgather(op, out, l, op.Rank(), 0, seg)
}

// recursiveDoublingAllgather completes buf on a power-of-two number of
// ranks in log2 P rounds: with mask = 1, 2, 4, ... rank r swaps the aligned
// window of mask blocks it holds with rank r^mask's, received in place.
// Each round pairs different ranks, so every transfer starts at step 0.
func recursiveDoublingAllgather[T Float](op *Op, buf []T, l layout, seg int) error {
	r := op.Rank()
	for mask := 1; mask < op.Size(); mask *= 2 {
		partner := r ^ mask
		mineLo, mineHi := l.blocks(r&^(mask-1), mask)
		theirsLo, theirsHi := l.blocks(partner&^(mask-1), mask)
		x := &transfer[T]{peer: partner, step: roundStep(0), send: buf[mineLo:mineHi], recv: buf[theirsLo:theirsHi]}
		if err := x.run(op, seg); err != nil {
			return err
		}
	}
	return nil
}

// ringAllgather completes buf, cut into blocks by l, of which this rank
// holds block pos, around the ring r -> r+1 (pos must be this rank's
// position in that ring, pos+1 its right neighbour's). At ring step t the
// rank sends block (pos-t) and receives block (pos-t-1) straight into buf,
// segment by segment, forwarding each segment as soon as it has arrived.
// Steps start at base.
func ringAllgather[T Float](op *Op, buf []T, l layout, pos int, base uint32, seg int) error {
	return postRingAllgather(op, buf, l, pos, base, seg).run()
}

// ringGather is a ring allgather whose receives are posted: run completes
// it. Posting early (before this rank's own block is ready) lets the
// neighbours' segments land in place instead of as unexpected messages.
type ringGather[T Float] struct {
	op    *Op
	buf   []T
	rg    ring
	pos   int
	base  uint32
	recvs []*transport.Request
}

// postRingAllgather posts every receive of ringAllgather; the blocks
// other than pos must not be touched until run returns.
func postRingAllgather[T Float](op *Op, buf []T, l layout, pos int, base uint32, seg int) *ringGather[T] {
	p := op.Size()
	g := &ringGather[T]{op: op, buf: buf, rg: newRingLayout(op, l, seg), pos: pos, base: base}
	items := (p - 1) * g.rg.nseg
	// Every segment lands in its final place, so every receive is posted
	// at once: no scratch, and all payloads can arrive zero-copy.
	g.recvs = make([]*transport.Request, items)
	for i := range items {
		lo, hi := g.rg.segment(mod(pos-i/g.rg.nseg-1, p), i%g.rg.nseg)
		g.recvs[i] = op.Recv(g.rg.left, base+uint32(i), AsBytes(buf[lo:hi:hi]))
	}
	return g
}

// run sends this rank's block (which must now be in place) and forwards
// every received segment to the right.
func (g *ringGather[T]) run() error {
	op, buf, rg, pos, base := g.op, g.buf, g.rg, g.pos, g.base
	p := op.Size()
	items := len(g.recvs)
	sends := make([]*transport.Request, 0, items)
	for j := range rg.nseg {
		lo, hi := rg.segment(pos, j)
		sends = append(sends, op.Send(rg.right, base+uint32(j), AsBytes(buf[lo:hi])))
	}
	for i := range items {
		lo, hi := rg.segment(mod(pos-i/rg.nseg-1, p), i%rg.nseg)
		payload, err := op.WaitData(g.recvs[i])
		if err != nil {
			return err
		}
		if err := received(op, rg.left, payload, buf[lo:hi]); err != nil {
			return err
		}
		if next := i + rg.nseg; next < items {
			sends = append(sends, op.Send(rg.right, base+uint32(next), AsBytes(buf[lo:hi])))
		}
	}
	return op.Wait(sends...)
}

// bruckAllgather completes buf on any number of ranks in ceil(log2 P)
// rounds (Bruck et al., 1997). Before the round with distance d rank r
// holds the d blocks r, r+1, ..., r+d-1 (mod P); it sends the first
// min(d, P-d) of them to r-d and receives as many from r+d, which are the
// blocks r+d, r+d+1, ... Blocks keep their absolute place in buf, so there
// is no final rotation and everything is received in place. A run of
// blocks that wraps past the end of buf travels as a second transfer
// (steps from stepsPerRound); sender and receiver see the same wrap since
// they name the same blocks. Each round pairs different ranks.
func bruckAllgather[T Float](op *Op, buf []T, l layout, seg int) error {
	p, r := op.Size(), op.Rank()
	for d := 1; d < p; d *= 2 {
		count := min(d, p-d)
		to, from := mod(r-d, p), mod(r+d, p)
		sendHead, sendTail, sendWraps := wrappedBlocks(buf, l, r, count)
		recvHead, recvTail, recvWraps := wrappedBlocks(buf, l, from, count)
		head := &transfer[T]{peer: to, from: from, split: true, step: roundStep(0), send: sendHead, recv: recvHead}
		if err := head.run(op, seg); err != nil {
			return err
		}
		if !sendWraps && !recvWraps {
			continue
		}
		tail := &transfer[T]{peer: to, from: from, split: true, step: roundStep(1), send: sendTail, recv: recvTail,
			noSend: !sendWraps, noRecv: !recvWraps}
		if err := tail.run(op, seg); err != nil {
			return err
		}
	}
	return nil
}

// wrappedBlocks returns the count blocks starting at block b of buf, mod
// the number of blocks, as the run up to the end of buf and, when it wraps,
// the run from the start.
func wrappedBlocks[T Float](buf []T, l layout, b, count int) (head, tail []T, wraps bool) {
	end := min(b+count, l.k)
	lo, hi := l.blocks(b, end-b)
	head = buf[lo:hi]
	if rest := b + count - end; rest > 0 {
		lo, hi = l.blocks(0, rest)
		return head, buf[lo:hi], true
	}
	return head, nil, false
}

// sameSlice reports whether a and b are the same elements of memory.
func sameSlice[T Float](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// overlaps reports whether a and b share any element of memory.
func overlaps[T Float](a, b []T) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	sz := uintptr(elemSize[T]())
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b))*sz && b0 < a0+uintptr(len(a))*sz
}
