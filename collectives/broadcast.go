package collectives

import (
	"github.com/sparcml/sparcml/transport"
)

// Broadcast copies root's data into every other rank's data. algo is
// AlgoDirect (pipelined binomial tree, for small vectors), AlgoRing
// (binomial scatter then ring allgather, after van de Geijn, for large ones)
// or AlgoAuto (DefaultCostModel chooses; every rank resolves it alike).
func Broadcast[T Float](op *Op, data []T, root int, algo Algo) error {
	return broadcast(op, data, root, algo, segmentElems[T](op))
}

func broadcast[T Float](op *Op, data []T, root int, algo Algo, seg int) error {
	if err := checkOp(op); err != nil {
		return err
	}
	p := op.Size()
	if algo == AlgoAuto {
		algo = DefaultCostModel.ChooseBroadcast(len(data)*elemSize[T](), p)
	}
	setDesc[T](op, transport.OpBroadcast, Sum, algo, root, len(data))
	if root < 0 || root >= p {
		return failInvalid(op, "broadcast: root %d out of range [0,%d)", root, p)
	}
	if p == 1 {
		if algo != AlgoDirect && algo != AlgoRing && algo != AlgoHierarchical {
			return failInvalid(op, "broadcast: unknown algorithm %v", algo)
		}
		return nil
	}
	if algo == AlgoHierarchical {
		return hierarchicalBroadcast(op, data, root, seg)
	}
	return runBroadcast(op, data, root, algo, seg)
}

// runBroadcast runs the flat broadcast algo under the descriptor op
// already carries, on P >= 2 ranks.
func runBroadcast[T Float](op *Op, data []T, root int, algo Algo, seg int) error {
	if len(data) == 0 {
		return dissemination(op)
	}
	switch algo {
	case AlgoDirect:
		return binomialBroadcast(op, data, root, seg)
	case AlgoRing:
		return scatterAllgatherBroadcast(op, data, root, seg)
	}
	return failInvalid(op, "broadcast supports %v, %v and %v, not %v", AlgoDirect, AlgoRing, AlgoHierarchical, algo)
}

// binomialTree gives a rank's place in the binomial tree rooted at root,
// in ranks relative to the root (vr = rank - root mod P): vr's parent is vr
// with its lowest set bit cleared, and its children are vr+m for the
// powers of two m below that bit. The subtree of vr covers [vr, vr+span).
type binomialTree struct {
	p, root, vr, span int
}

func newBinomialTree(p, rank, root int) binomialTree {
	vr := mod(rank-root, p)
	span := 1
	if vr == 0 {
		for span < p {
			span *= 2
		}
	} else {
		span = vr & -vr
	}
	return binomialTree{p: p, root: root, vr: vr, span: span}
}

// rank converts a relative rank back to a real one.
func (b binomialTree) rank(vr int) int { return mod(vr+b.root, b.p) }

// parent returns the real rank of the parent (the root has none: -1).
func (b binomialTree) parent() int {
	if b.vr == 0 {
		return -1
	}
	return b.rank(b.vr - b.span)
}

// children returns the relative ranks of the children, the largest
// subtree first.
func (b binomialTree) children(yield func(int) bool) {
	for m := b.span / 2; m > 0; m /= 2 {
		if c := b.vr + m; c < b.p && !yield(c) {
			return
		}
	}
}

// binomialBroadcast sends data down the binomial tree, segment by segment:
// every rank posts all its receives from its parent straight into data and
// forwards each segment to its children as soon as it has arrived, so the
// levels of the tree work on different segments at once. Each pair of
// ranks exchanges one segmented message stream, steps 0..nseg-1.
func binomialBroadcast[T Float](op *Op, data []T, root, seg int) error {
	tree := newBinomialTree(op.Size(), op.Rank(), root)
	nseg := segmentsFor(len(data), seg, stepsPerRound)
	size := max(seg, ceilDiv(len(data), stepsPerRound))
	segment := func(k int) []T {
		lo := min(k*size, len(data))
		hi := min(lo+size, len(data))
		return data[lo:hi:hi]
	}
	parent := tree.parent()
	var recvs []*transport.Request
	if parent >= 0 {
		recvs = make([]*transport.Request, nseg)
		for k := range nseg {
			recvs[k] = op.Recv(parent, uint32(k), AsBytes(segment(k)))
		}
	}
	var sends []*transport.Request
	// The root only sends, so on its own it would never see another
	// rank's descriptor. Its first child acknowledges the first segment
	// with an empty message: a root whose children called a different
	// collective gets the mismatch too instead of returning success.
	first := tree.rank(firstChild(op.Size()))
	var ack *transport.Request
	if parent < 0 {
		ack = op.Recv(first, broadcastAckStep, nil)
	}
	for k := range nseg {
		if parent >= 0 {
			payload, err := op.WaitData(recvs[k])
			if err != nil {
				return err
			}
			if err := received(op, parent, payload, segment(k)); err != nil {
				return err
			}
			if k == 0 && parent == root && op.Rank() == first {
				sends = append(sends, op.Send(root, broadcastAckStep))
			}
		}
		for c := range tree.children {
			sends = append(sends, op.Send(tree.rank(c), uint32(k), AsBytes(segment(k))))
		}
	}
	if ack != nil {
		sends = append(sends, ack)
	}
	return op.Wait(sends...)
}

// broadcastAckStep tags the first child's acknowledgement to the root,
// apart from the segment steps.
const broadcastAckStep = 1 << 30

// firstChild is the relative rank of the root's first child in the
// binomial tree: the largest power of two below P.
func firstChild(p int) int {
	c := 1
	for c*2 < p {
		c *= 2
	}
	return c
}

// scatterAllgatherBroadcast is van de Geijn's broadcast: data is cut into
// P blocks indexed by relative rank, a binomial scatter leaves block vr on
// relative rank vr (each rank receives its whole subtree's blocks from its
// parent and hands each child its subtree's share), and a ring allgather
// completes every copy. About 2(P-1)/P of the vector crosses each link
// instead of the tree's log2(P) copies at the root.
func scatterAllgatherBroadcast[T Float](op *Op, data []T, root, seg int) error {
	p := op.Size()
	tree := newBinomialTree(p, op.Rank(), root)
	blocks := balanced(len(data), p)
	subtree := func(vr, span int) []T {
		lo, hi := blocks.blocks(vr, min(span, p-vr))
		return data[lo:hi]
	}
	if parent := tree.parent(); parent >= 0 {
		x := &transfer[T]{peer: parent, step: roundStep(0), recv: subtree(tree.vr, tree.span), noSend: true}
		if err := x.run(op, seg); err != nil {
			return err
		}
	}
	for c := range tree.children {
		x := &transfer[T]{peer: tree.rank(c), step: roundStep(0), send: subtree(c, c&-c), noRecv: true}
		if err := x.run(op, seg); err != nil {
			return err
		}
	}
	return ringAllgather(op, data, blocks, tree.vr, roundStep(1), seg)
}
