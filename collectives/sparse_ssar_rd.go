package collectives

import (
	"github.com/sparcml/sparcml/sparse"
)

// ssarRecursiveDoubling is SparCML's SSAR recursive doubling: log2(P)
// rounds in which partners exchange their partial sums whole and both
// merge, so after round k every rank holds the sum of its group of 2^(k+1).
// A partial travels in whichever encoding is smaller and switches to dense
// for good once the union of its supports passes the rule (the merge
// kernel decides on the exact union). For P not a power of two, the first
// 2r ranks (r = P - 2^floor(log2 P)) fold first: each even one sends its
// input to the odd one above, sits out the rounds and receives the result
// at the end (the MPICH scheme).
//
// Messages: log2(P') per rank, plus one in and one out for folded pairs.
// Bytes: from k*c*log2(P) (identical supports) to (P-1)*k*c (disjoint),
// capped per round at the dense size.
func ssarRecursiveDoubling[T Float](c *spCall[T], out *sparse.Vector[T], denseOut bool) error {
	g := spFold(c.p)
	rank, dim := c.rank, c.in.Dim
	if rank < 2*g.rem && rank%2 == 0 {
		// Folded out: hand the input to the partner, get the result back.
		buf, err := c.encode(c.sc.get(sparse.CompactSize(c.in.NNZ(), dim, sparse.ValueSize[T]()))[:0], c.in, 0, dim)
		if err != nil {
			return err
		}
		r := c.recv(rank+1, spStepUnfold, c.resultGuess())
		if err := c.op.Wait(c.op.Send(rank+1, spStepFold, buf)); err != nil {
			return err
		}
		msg, err := c.data(r)
		if err != nil {
			return err
		}
		res, err := c.received(msg, rank+1, dim)
		if err != nil {
			return err
		}
		c.finish(out, res, denseOut)
		return nil
	}

	cur := c.in // read only: every merge writes into a scratch vector
	spare := [2]*sparse.Vector[T]{c.vector(), c.vector()}
	next := 0
	// mergeIn adds a partner's partial, read where it landed, to cur.
	// Addition is commutative bit for bit, so both partners get the same
	// bits.
	mergeIn := func(peer int, msg []byte) error {
		recvd, err := c.received(msg, peer, dim)
		if err != nil {
			return err
		}
		dst := spare[next]
		next ^= 1
		if err := sparse.Add(dst, cur, recvd); err != nil {
			return c.op.Fail(err)
		}
		cur = dst
		return nil
	}
	if rank < 2*g.rem {
		msg, err := c.data(c.recv(rank-1, spStepFold, c.in.NNZ()*8+sparse.HeaderSize))
		if err != nil {
			return err
		}
		if err := mergeIn(rank-1, msg); err != nil {
			return err
		}
	}
	newRank := g.newRank(rank)
	sendBuf := c.sc.get(c.resultGuess())
	for k, d := 0, 1; d < g.pof2; k, d = k+1, 2*d {
		peer := g.oldRank(newRank ^ d)
		var err error
		if sendBuf, err = c.encode(sendBuf[:0], cur, 0, dim); err != nil {
			return err
		}
		r := c.recv(peer, spStepRD+uint32(k), len(sendBuf))
		s := c.op.Send(peer, spStepRD+uint32(k), sendBuf)
		msg, err := c.data(r)
		if err != nil {
			return err
		}
		// The send must finish before sendBuf is encoded into again.
		if err := c.op.Wait(s); err != nil {
			return err
		}
		if err := mergeIn(peer, msg); err != nil {
			return err
		}
	}
	c.sc.keep(sendBuf)
	if rank < 2*g.rem {
		buf, err := c.encode(c.sc.get(sparse.CompactSize(cur.NNZ(), dim, sparse.ValueSize[T]()))[:0], cur, 0, dim)
		if err != nil {
			return err
		}
		if err := c.op.Wait(c.op.Send(rank-1, spStepUnfold, buf)); err != nil {
			return err
		}
	}
	c.finish(out, cur, denseOut)
	return nil
}

// spFolding maps P ranks onto the largest power of two pof2 <= P: the
// first 2*rem ranks pair up (even into odd), the rest keep going.
type spFolding struct{ pof2, rem int }

func spFold(p int) spFolding {
	pof2 := 1
	for pof2*2 <= p {
		pof2 *= 2
	}
	return spFolding{pof2, p - pof2}
}

// newRank is the rank among the pof2 survivors (odd ranks of folded pairs
// and every rank from 2*rem up).
func (g spFolding) newRank(r int) int {
	if r < 2*g.rem {
		return r / 2
	}
	return r - g.rem
}

func (g spFolding) oldRank(n int) int {
	if n < g.rem {
		return 2*n + 1
	}
	return n + g.rem
}
