package collectives

import (
	"github.com/sparcml/sparcml/transport"
)

// spAllgatherBlobs gives every rank every rank's blob (byte strings of any
// size, each rank its own) with Bruck's allgather: ceil(log2 P) rounds for
// any P, the generalisation of recursive doubling that SparCML's
// split-allgather ends with. In round k (distance d = 2^k) a rank sends the
// first min(d, P-d) blobs it holds, its own first then those of the next
// ranks up, to rank-d, and appends the blobs of rank+d.. it receives. A
// rank sends and receives P-1 blobs in all, the bandwidth lower bound.
//
// A message is its blobs concatenated with no framing: sizeOf reads the
// size of the blob at the start of a buffer from the blob's own header. The
// blobs returned alias the received messages, which stay in sc until the
// call ends. blobs[r] is rank r's blob (blobs[Rank()] is mine).
func spAllgatherBlobs(op *Op, sc *spScratch, step uint32, mine []byte, sizeOf func([]byte) (int, error)) ([][]byte, error) {
	p, rank := op.Size(), op.Rank()
	have := make([][]byte, 1, p) // have[i] is the blob of rank (rank+i) mod p
	have[0] = mine
	var sends []*transport.Request
	for k, d := 0, 1; d < p; k, d = k+1, 2*d {
		cnt := min(d, p-d)
		to, from := (rank-d+p)%p, (rank+d)%p
		sent := 0
		for _, b := range have[:cnt] {
			sent += len(b)
		}
		r := op.Recv(from, step+uint32(k), sc.getRecv(sent))
		sends = append(sends, op.Send(to, step+uint32(k), have[:cnt]...))
		msg, err := op.WaitData(r)
		if err != nil {
			return nil, err
		}
		sc.keep(msg)
		for range cnt {
			n, err := sizeOf(msg)
			if err != nil {
				return nil, op.Fail(errSparseProtocol(op.commRank(from), "allgather round %d: %v", k, err))
			}
			have = append(have, msg[:n:n])
			msg = msg[n:]
		}
		if len(msg) != 0 {
			return nil, op.Fail(errSparseProtocol(op.commRank(from), "allgather round %d: %d bytes beyond %d blobs", k, len(msg), cnt))
		}
	}
	if err := op.Wait(sends...); err != nil {
		return nil, err
	}
	blobs := make([][]byte, p)
	for i, b := range have {
		blobs[(rank+i)%p] = b
	}
	return blobs, nil
}

// spBruckBytesSent returns the bytes each rank sends and its message count
// in spAllgatherBlobs when rank r's blob has size[r] bytes.
func spBruckBytesSent(size []int64) (bytes []int64, msgs []int) {
	p := len(size)
	bytes, msgs = make([]int64, p), make([]int, p)
	sum := spCircularSums(size)
	for r := range p {
		for d := 1; d < p; d *= 2 {
			bytes[r] += sum(r, min(d, p-d))
			msgs[r]++
		}
	}
	return bytes, msgs
}

// spCircularSums returns the sum of x[(r+i) mod len(x)] for i < n, from
// prefix sums: each of a Bruck allgather's P log2 P messages in O(1)
// instead of the blocks it carries, P^2 in all, which every rank's plan
// of an AlgoAuto call pays at 1024 ranks (go test -bench ChooseSparse
// ./collectives/).
func spCircularSums[E int64 | float64](x []E) func(r, n int) E {
	pre := make([]E, 2*len(x)+1)
	for i := range 2 * len(x) {
		pre[i+1] = pre[i] + x[i%len(x)]
	}
	return func(r, n int) E { return pre[r+n] - pre[r] }
}

// bruck adds the allgather of blocks of the given sizes (spAllgatherBlobs)
// and in-memory sizes (spWire.mem; nil: the same), whose index codec
// costs codec[r] seconds on each side (spWire.codecSecs; nil: none);
// reduceFactor > 0 charges every received in-memory byte that many
// reductions. Blocks are forwarded as they arrived, so each is encoded
// once, by its own rank, and decoded once by each of the others: the
// forwarding ranks are charged the wire alone.
func (pl *spPlan) bruck(size, mem, codec []float64, reduceFactor float64) {
	p := len(size)
	if mem == nil {
		mem = size
	}
	if codec == nil {
		codec = make([]float64, p)
	}
	sizes, mems, codecs := spCircularSums(size), spCircularSums(mem), spCircularSums(codec)
	for r := range p {
		pl.memSent[r] += mem[r]
		pl.codec[r] += codec[r]
		for d := 1; d < p; d *= 2 {
			to, n := (r-d+p)%p, min(d, p-d)
			pl.memRecv[to] += mems(r, n)
			pl.red[to] += mems(r, n) * reduceFactor
			pl.codec[to] += codecs(r, n)
			pl.msg(r, to, sizes(r, n), 0, 0)
		}
	}
	pl.rounds = ceilLog2(p) // each round forwards what the one before brought
	pl.endPhase()
}

// direct adds the one-round exchange of spAllgatherDirect: rank r sends
// its block of size[r] bytes to each of the P-1 others, all posted
// together, and receives every other block; each is encoded once and
// decoded by each receiver.
func (pl *spPlan) direct(size []float64) {
	p := len(size)
	total := 0.0
	for _, n := range size {
		total += n
	}
	for r, n := range size {
		pl.sent[r] += float64(p-1) * n
		pl.recv[r] += total - n
		pl.memSent[r] += n
		pl.memRecv[r] += total - n
		pl.phaseMsgs[r] += p - 1
	}
	pl.endPhase()
}
