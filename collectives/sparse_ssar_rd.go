package collectives

import (
	"math"

	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
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
	g := newFoldedGroup(c.p)
	rank, dim := c.rank, c.in.Dim
	if rank < 2*g.extra && rank%2 == 0 {
		// Folded out: hand the input to the partner, get the result back.
		buf, err := c.encode(c.sc.get(c.compactSize(c.in.NNZ(), dim))[:0], c.in, 0, dim)
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
		transport.Work(c.op.T, transport.KernelMerge, entryBytes([]*sparse.Vector[T]{cur, recvd}))
		cur = dst
		return nil
	}
	if rank < 2*g.extra {
		msg, err := c.data(c.recv(rank-1, spStepFold, c.in.NNZ()*(sparse.IndexSize+c.es)+sparse.BlockHeaderSize))
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
	if rank < 2*g.extra {
		buf, err := c.encode(c.sc.get(c.compactSize(cur.NNZ(), dim))[:0], cur, 0, dim)
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

// planSSARRecursiveDoubling is ssarRecursiveDoubling's schedule for the
// cost model: the fold, then in each round every survivor sends the union
// of its group's supports (merged on arrival), then the unfold.
func planSSARRecursiveDoubling(pl *spPlan, p, dim int, w spWire, sup spSupports) {
	g := newFoldedGroup(p)
	// A partial sum of several ranks is dense in memory once the
	// kernels' rule says so; an input sent in the fold is as given.
	// Each merge reads the rank's own partial as well as the one it
	// received (sparse.Add of both, as mergeIn reports it): the sender's
	// message is its own partial, which it merges too.
	send := func(from, to int, k float64, group []int, reduce float64) (mem float64) {
		idx := spIdx(w, sup, group, 0, dim)
		memDense := len(group) > 1 && sparse.PreferDense(int(math.Round(k)), dim, w.s)
		b, dense := w.msg(k, dim, idx, memDense)
		mem = w.mem(k, dim, b, dense)
		pl.msg(from, to, b, mem, reduce)
		pl.indexCodec(from, to, w.codecSecs(k, dim, idx, memDense))
		return mem
	}
	if g.extra > 0 {
		for r := 0; r < 2*g.extra; r += 2 {
			send(r, r+1, sup.count(r, 0, dim), []int{r}, 1)
			k := sup.count(r+1, 0, dim)
			b, dense := w.msg(k, dim, spIdx(w, sup, []int{r + 1}, 0, dim), false)
			pl.red[r+1] += w.mem(k, dim, b, dense)
		}
		pl.endPhase()
	}
	for d := 1; d < g.pof2; d *= 2 {
		for block := 0; block < g.pof2; block += d {
			// The group whose sum each newrank of the block holds before
			// this round, and the size of that sum.
			var group []int
			for o := block; o < block+d; o++ {
				group = append(group, g.oldRank(o))
				if o < g.extra {
					group = append(group, 2*o)
				}
			}
			k := sup.union(group, 0, dim)
			for n := block; n < block+d; n++ {
				from := g.oldRank(n)
				pl.red[from] += send(from, g.oldRank(n^d), k, group, 1)
			}
		}
		pl.endPhase()
	}
	if g.extra > 0 {
		all := spAllRanks(p)
		k := sup.union(all, 0, dim)
		for r := 0; r < 2*g.extra; r += 2 {
			send(r+1, r, k, all, 0)
		}
		pl.endPhase()
	}
}
