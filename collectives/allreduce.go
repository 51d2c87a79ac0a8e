package collectives

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/sparcml/sparcml/transport"
)

// Tuning shared by the dense algorithms.
const (
	// segmentBytes is the largest payload of one message. Large transfers
	// are cut into segments so that reducing (or forwarding) segment s
	// overlaps the transfer of segment s+1, and so that transports see
	// bounded messages (only vectors of more than 2^22 segments, 2 TiB,
	// get longer ones, to keep step numbers in range).
	segmentBytes = 512 << 10
	// pipelineDepth is how many segments of one transfer are in flight
	// (receives posted, sends started) ahead of the one being processed.
	pipelineDepth = 4
	// stepsPerRound spaces the step numbers of the transfers between one
	// pair of ranks: the k-th transfer of an operation between two ranks
	// uses steps [k*stepsPerRound, (k+1)*stepsPerRound), one per segment,
	// so every (sender, receiver, step) is unique. The first message
	// between any two ranks is step 0 in every algorithm, so a rank that
	// runs a different collective than its peer usually meets the peer's
	// first message at the tag it waits for, and the descriptor check
	// fails the operation at once instead of both waiting for the deadline.
	stepsPerRound = 1 << 22
)

// Allreduce reduces data element-wise with red across all ranks, in place:
// on return every rank holds the same result (for Avg, the sum divided by
// the number of ranks). algo picks the algorithm;
// AlgoAuto lets model choose from the message size and the number of
// ranks (every rank must pass the same model so they agree). It returns the
// algorithm used.
func Allreduce[T Float](op *Op, data []T, red ReduceOp, algo Algo, model CostModel) (Algo, error) {
	return allreduce(op, data, red, algo, model, segmentElems[T](op))
}

// allreduce is Allreduce with segments of at most seg elements (tests use
// tiny segments to exercise the pipelines).
func allreduce[T Float](op *Op, data []T, red ReduceOp, algo Algo, model CostModel, seg int) (Algo, error) {
	if err := checkOp(op); err != nil {
		return algo, err
	}
	if algo == AlgoAuto {
		algo = model.chooseAllreduceOn(op.Topo, len(data)*elemSize[T](), op.Size())
	}
	setDesc[T](op, transport.OpAllreduce, red, algo, 0, len(data))
	if algo == AlgoHierarchical {
		if !validReduce(red) {
			return algo, failInvalid(op, "unknown reduction %v", red)
		}
		if op.Size() == 1 {
			return algo, nil
		}
		return algo, hierarchicalAllreduce(op, data, red, model, seg, hierarchicalChunks(len(data)*elemSize[T]()))
	}
	return algo, runAllreduce(op, data, red, algo, seg)
}

// runAllreduce runs the dense allreduce algo under the descriptor op
// already carries (an allreduce's, or the sparse allreduce's whose dense
// end it is), in segments of at most seg elements.
func runAllreduce[T Float](op *Op, data []T, red ReduceOp, algo Algo, seg int) error {
	switch {
	case !validReduce(red):
		return failInvalid(op, "unknown reduction %v", red)
	case !isAllreduceAlgo(algo):
		return failInvalid(op, "%v is not a dense allreduce algorithm", algo)
	case op.Size() == 1:
		return nil
	case len(data) == 0:
		return dissemination(op)
	}
	switch algo {
	case AlgoRing:
		return ringAllreduce(op, data, red, seg)
	case AlgoRabenseifner:
		return rabenseifnerAllreduce(op, data, red, seg)
	default: // AlgoRecursiveDoubling
		return recursiveDoublingAllreduce(op, data, red, seg)
	}
}

// checkOp rejects an Op that cannot run anything, and gives a missing
// context a default so waits never dereference nil.
func checkOp(op *Op) error {
	if op == nil || op.T == nil {
		return fmt.Errorf("%w: nil op or transport", transport.ErrInvalid)
	}
	if op.Ctx == nil {
		op.Ctx = context.Background()
	}
	return nil
}

// failInvalid fails the operation on every rank with an ErrInvalid error.
func failInvalid(op *Op, format string, args ...any) error {
	return op.Fail(fmt.Errorf("%w: %s", transport.ErrInvalid, fmt.Sprintf(format, args...)))
}

// failSize fails the operation because a peer sent a payload of the wrong
// size: the ranks disagree about the operation's arguments in a way the
// descriptor does not show (Allgatherv counts, for example).
func failSize(op *Op, peer int, got, want int) error {
	return op.Fail(fmt.Errorf("%w: rank %d sent %d bytes, expected %d", transport.ErrMismatch, op.commRank(peer), got, want))
}

func elemSize[T Float]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// segmentElems is the number of elements of T in one segment over op's
// transport: its own segment size (transport.Capabilities) or
// segmentBytes.
func segmentElems[T Float](op *Op) int {
	seg := 0
	if op != nil && op.T != nil { // a nil op is refused by the algorithm
		seg = op.T.Caps().SegmentBytes
	}
	if seg <= 0 {
		seg = segmentBytes
	}
	return max(seg/elemSize[T](), 1)
}

// segmentsFor returns how many segments a transfer of n elements is cut
// into: at least one, so that even an empty transfer exchanges a message
// (which carries the descriptor and keeps both sides in step), and at most
// limit, growing the segment beyond seg if needed.
func segmentsFor(n, seg, limit int) int {
	if n <= 0 {
		return 1
	}
	return min(ceilDiv(n, seg), limit)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// part returns the bounds of part i when n elements are split into k parts
// whose sizes differ by at most one (the first n%k parts are one longer).
func part(n, k, i int) (lo, hi int) {
	q, r := n/k, n%k
	lo = i*q + min(i, r)
	hi = lo + q
	if i < r {
		hi++
	}
	return lo, hi
}

// layout splits a buffer into blocks, one per rank (or per leaf of a
// recursive algorithm): balanced when offs is nil, else given by offs
// (len(offs) == number of blocks + 1).
type layout struct {
	n, k int
	offs []int
}

func balanced(n, k int) layout { return layout{n: n, k: k} }

func fromCounts(counts []int) layout {
	offs := make([]int, len(counts)+1)
	for i, c := range counts {
		offs[i+1] = offs[i] + c
	}
	return layout{n: offs[len(counts)], k: len(counts), offs: offs}
}

// start returns the offset of block b; start(k) is the total length.
func (l layout) start(b int) int {
	if l.offs != nil {
		return l.offs[b]
	}
	q, r := l.n/l.k, l.n%l.k
	return b*q + min(b, r)
}

// block returns the bounds of block b.
func (l layout) block(b int) (lo, hi int) { return l.start(b), l.start(b + 1) }

// blocks returns the bounds of the blocks [b, b+count).
func (l layout) blocks(b, count int) (lo, hi int) { return l.start(b), l.start(b + count) }

// largest returns the size of the largest block.
func (l layout) largest() int {
	if l.offs == nil {
		return ceilDiv(l.n, l.k)
	}
	m := 0
	for b := range l.k {
		m = max(m, l.offs[b+1]-l.offs[b])
	}
	return m
}

// mod returns a mod p in [0, p).
func mod(a, p int) int { return ((a % p) + p) % p }

// received checks that a completed receive delivered exactly dst's length
// and puts it in dst if the transport could not receive in place.
func received[T Float](op *Op, peer int, payload []byte, dst []T) error {
	want := AsBytes(dst)
	if len(payload) != len(want) {
		return failSize(op, peer, len(payload), len(want))
	}
	if len(want) > 0 && &payload[0] != &want[0] {
		copy(want, payload)
	}
	return nil
}

// transfer is one segmented, pipelined exchange with a single peer: send
// is sent (unless noSend) while len(recv) elements are received (unless
// noRecv), either reduced into recv with red or placed into it. Both sides
// cut the same length into the same segments, so their step numbers agree.
type transfer[T Float] struct {
	peer int
	// from, when split is set, is the rank received from; peer then only
	// receives the sends.
	from   int
	split  bool
	step   uint32 // first step; segment k uses step+k
	send   []T
	recv   []T
	noSend bool
	noRecv bool
	reduce bool
	red    ReduceOp
	// inPlace says send and recv are the same slice: segment k may only be
	// reduced into once its own send has completed.
	inPlace bool
}

// run performs the transfer with segments of seg elements. Reductions go
// through a pool buffer of at most pipelineDepth segments; placed data is
// received straight into recv.
func (x *transfer[T]) run(op *Op, seg int) error {
	ns, nr := 0, 0
	if !x.noSend {
		ns = segmentsFor(len(x.send), seg, stepsPerRound)
	}
	if !x.noRecv {
		nr = segmentsFor(len(x.recv), seg, stepsPerRound)
	}
	sendSeg := max(seg, ceilDiv(len(x.send), stepsPerRound))
	recvSeg := max(seg, ceilDiv(len(x.recv), stepsPerRound))
	depth := pipelineDepth
	esz := elemSize[T]()

	var scratch []byte
	slotElems := min(recvSeg, len(x.recv))
	if x.reduce && nr > 0 {
		scratch = op.Pool.Get(min(depth, nr) * slotElems * esz)
	}
	segment := func(s []T, size, k int) []T {
		lo := min(k*size, len(s))
		hi := min(lo+size, len(s))
		return s[lo:hi:hi]
	}
	// Reduced segments land in one of depth slots; placed segments need no
	// slot, so all their receives are posted at once (all zero-copy).
	ahead := depth
	if !x.reduce {
		ahead = max(nr, 1)
	}
	recvs := make([]*transport.Request, min(ahead, nr))
	sends := make([]*transport.Request, ns)
	post := func(k int) {
		dst := AsBytes(segment(x.recv, recvSeg, k))
		if x.reduce {
			off := (k % depth) * slotElems * esz
			dst = scratch[off : off+len(dst) : off+len(dst)]
		}
		recvs[k%ahead] = op.Recv(x.source(), x.step+uint32(k), dst)
	}
	start := func(k int) {
		sends[k] = op.Send(x.peer, x.step+uint32(k), AsBytes(segment(x.send, sendSeg, k)))
	}
	for k := range min(ahead, nr) {
		post(k)
	}
	for k := range min(depth, ns) {
		start(k)
	}
	for k := range max(nr, ns) {
		if k < nr {
			if err := x.arrive(op, k, recvs[k%ahead], segment(x.recv, recvSeg, k), sends); err != nil {
				return err // scratch is dropped: a failed receive may still be landing in it
			}
			if k+ahead < nr {
				post(k + ahead)
			}
		}
		if k+depth < ns {
			start(k + depth)
		}
	}
	if err := op.Wait(sends...); err != nil {
		return err
	}
	op.Pool.Put(scratch)
	return nil
}

// source is the rank the transfer receives from.
func (x *transfer[T]) source() int {
	if x.split {
		return x.from
	}
	return x.peer
}

// arrive waits for receive k and reduces or places it into dst.
func (x *transfer[T]) arrive(op *Op, k int, req *transport.Request, dst []T, sends []*transport.Request) error {
	payload, err := op.WaitData(req)
	if err != nil {
		return err
	}
	if !x.reduce {
		return received(op, x.source(), payload, dst)
	}
	if len(payload) != len(dst)*elemSize[T]() {
		return failSize(op, x.source(), len(payload), len(dst)*elemSize[T]())
	}
	if x.inPlace && k < len(sends) {
		if err := op.Wait(sends[k]); err != nil {
			return err
		}
	}
	ReduceInto(x.red, dst, FromBytes[T](payload))
	transport.Work(op.T, transport.KernelReduce, len(payload))
	return nil
}

// roundStep returns the first step of the k-th transfer (from 0) between
// the same two ranks.
func roundStep(k int) uint32 { return uint32(k) * stepsPerRound }

// foldedGroup describes how a recursive algorithm (recursive doubling,
// Rabenseifner) runs on a number of ranks that is not a power of two, the
// MPICH way: the first 2*extra ranks pair up, the even one of each pair
// hands its vector to the odd one and sits out, and the remaining pof2 ranks
// run the power-of-two algorithm under new ranks 0..pof2-1.
type foldedGroup struct {
	p, pof2, extra int
}

func newFoldedGroup(p int) foldedGroup {
	pof2 := 1
	for pof2*2 <= p {
		pof2 *= 2
	}
	return foldedGroup{p: p, pof2: pof2, extra: p - pof2}
}

// newRank returns rank's index among the pof2 active ranks, or -1 when it
// sits out.
func (g foldedGroup) newRank(rank int) int {
	switch {
	case rank >= 2*g.extra:
		return rank - g.extra
	case rank%2 == 1:
		return rank / 2
	default:
		return -1
	}
}

// oldRank is the inverse of newRank.
func (g foldedGroup) oldRank(nr int) int {
	if nr < g.extra {
		return 2*nr + 1
	}
	return nr + g.extra
}

// levels returns log2(pof2).
func (g foldedGroup) levels() int {
	l := 0
	for 1<<l < g.pof2 {
		l++
	}
	return l
}

// fold runs the first round of a folded algorithm: even ranks below
// 2*extra send data to their odd neighbour, which reduces it into its own.
func fold[T Float](op *Op, g foldedGroup, data []T, red ReduceOp, seg int) error {
	r := op.Rank()
	if r >= 2*g.extra {
		return nil
	}
	x := &transfer[T]{step: roundStep(0), reduce: true, red: red}
	if r%2 == 0 {
		x.peer, x.send, x.noRecv = r+1, data, true
	} else {
		x.peer, x.recv, x.noSend = r-1, data, true
	}
	return x.run(op, seg)
}

// unfold runs the last round of a folded algorithm: each odd rank below
// 2*extra returns the result to the even neighbour that sat out. It is the
// pair's second transfer, after fold.
func unfold[T Float](op *Op, g foldedGroup, data []T, seg int) error {
	r := op.Rank()
	if r >= 2*g.extra {
		return nil
	}
	x := &transfer[T]{step: roundStep(1)}
	if r%2 == 1 {
		x.peer, x.send, x.noRecv = r-1, data, true
	} else {
		x.peer, x.recv, x.noSend = r+1, data, true
	}
	return x.run(op, seg)
}
