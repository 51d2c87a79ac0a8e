package collectives

import (
	"math"
	"unsafe"

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

	part := &rdPartial[T]{c: c, cur: c.in}
	if rank < 2*g.extra {
		posted := c.sc.getRecv(c.in.NNZ()*(sparse.IndexSize+c.es) + sparse.BlockHeaderSize)
		msg, err := c.data(c.op.Recv(rank-1, spStepFold, posted))
		if err != nil {
			return err
		}
		if err := part.merge(rank-1, msg, posted, true); err != nil {
			return err
		}
	}
	newRank := g.newRank(rank)
	for k, d := 0, 1; d < g.pof2; k, d = k+1, 2*d {
		peer := g.oldRank(newRank ^ d)
		sendBuf, err := part.encoded()
		if err != nil {
			return err
		}
		posted := c.sc.getRecv(len(sendBuf))
		r := c.op.Recv(peer, spStepRD+uint32(k), posted)
		s := c.op.Send(peer, spStepRD+uint32(k), sendBuf)
		msg, err := c.data(r)
		if err != nil {
			return err
		}
		// The send must finish before the partial changes.
		if err := c.op.Wait(s); err != nil {
			return err
		}
		if err := part.merge(peer, msg, posted, 2*d < g.pof2 || rank < 2*g.extra); err != nil {
			return err
		}
	}
	if rank < 2*g.extra {
		buf, err := part.encoded()
		if err != nil {
			return err
		}
		if err := c.op.Wait(c.op.Send(rank-1, spStepUnfold, buf)); err != nil {
			return err
		}
	}
	c.finish(out, part.cur, denseOut)
	return nil
}

// rdPartial is a rank's partial sum in recursive doubling: the input,
// then the sum of its group, kept in its encoding between rounds so that
// what a rank holds while it waits is one encoded partial and the receive
// posted for its partner's. A scratch vector serves one merge and goes
// back to its pool as soon as the sum is encoded, and a partner's
// partial that arrives dense takes this rank's added into it in place,
// its message becoming the partial. `sparcml sim` holds every rank's
// partials in one process (docs/SIMULATION.md, Limits); on one rank per
// process the pool hands the same scratch vector back at the next merge.
type rdPartial[T Float] struct {
	c     *spCall[T]
	cur   *sparse.Vector[T] // read only while it is the input
	buf   []byte            // a received message or the send buffer
	fresh bool              // buf holds cur's encoding
	views bool              // cur is a view of buf, so writing cur writes buf
	spare [2]*sparse.Vector[T]
	next  int
}

// encoded is cur's encoding to send, encoded into buf unless it already is.
func (p *rdPartial[T]) encoded() ([]byte, error) {
	if !p.fresh {
		n, err := p.encode()
		if err != nil {
			return nil, p.c.op.Fail(err)
		}
		p.c.codecWork(n)
	}
	return p.buf, nil
}

// encode encodes cur into buf, without charging the work (encoded and
// merge charge it), views it there when it can and gives the scratch
// vectors back. It returns the bytes encoded.
func (p *rdPartial[T]) encode() (int, error) {
	c := p.c
	if p.buf == nil {
		p.buf = c.sc.get(c.resultGuess())
	}
	old := p.buf
	var err error
	if p.buf, err = c.encodeExact(p.buf[:0], p.cur, 0, c.in.Dim); err != nil {
		return 0, err
	}
	if !spSameArray(old, p.buf) { // grown: release the old array
		c.sc.drop(old)
		c.sc.keep(p.buf)
	}
	p.fresh = true
	if v := (&sparse.Vector[T]{}); !c.packed && v.DecodeView(p.buf) == nil && spViews(v, p.buf) {
		p.dropSpares()
		p.cur, p.views = v, true
	}
	return len(p.buf), nil
}

// merge adds a partner's partial, which landed in msg (received into
// posted), to cur, and drops what it no longer needs; with more (another
// send follows) it encodes the sum before its work is charged, which in
// `sparcml sim` lets the next rank run. Addition is commutative bit for
// bit, so both partners get the same bits whichever side is added into
// the other.
func (p *rdPartial[T]) merge(peer int, msg, posted []byte, more bool) error {
	c := p.c
	recvd, err := c.received(msg, peer, c.in.Dim)
	if err != nil {
		return err
	}
	work := entryBytes([]*sparse.Vector[T]{p.cur, recvd})
	encoded := 0
	switch {
	case recvd.Dense && !recvd.IsBlock() && spViews(recvd, msg):
		// Add cur into the partner's partial where it landed.
		err = p.cur.AddTo(recvd.Values)
		if !spSameArray(msg, posted) {
			c.sc.drop(posted)
		}
		p.dropSpares()
		c.sc.drop(p.buf)
		p.cur, p.buf, p.fresh, p.views = recvd, msg, true, true
	case p.cur.Dense && !p.cur.IsBlock() && p.cur != c.in:
		err = recvd.AddTo(p.cur.Values)
		p.fresh = p.fresh && p.views
		c.sc.drop(msg)
		c.sc.drop(posted)
	default:
		dst := p.scratch()
		err = sparse.Add(dst, p.cur, recvd)
		p.cur, p.fresh, p.views = dst, false, false
		c.sc.drop(msg)
		c.sc.drop(posted)
		if err == nil && more {
			encoded, err = p.encode()
		}
	}
	if err != nil {
		return c.op.Fail(err)
	}
	transport.Work(c.op.T, transport.KernelMerge, work)
	if encoded > 0 {
		c.codecWork(encoded)
	}
	return nil
}

// scratch is the scratch vector to merge into next (not cur).
func (p *rdPartial[T]) scratch() *sparse.Vector[T] {
	if p.spare[p.next] == nil {
		p.spare[p.next] = p.c.vector()
	}
	v := p.spare[p.next]
	p.next ^= 1
	return v
}

// dropSpares gives the scratch vectors back to their pool.
func (p *rdPartial[T]) dropSpares() {
	for i, s := range p.spare {
		if s != nil {
			p.c.sc.dropVector(s)
			p.spare[i] = nil
		}
	}
}

// spViews says whether v's values lie in b: DecodeView aliased b rather
// than copying it (which it does when b is not aligned), so writing into
// v writes into b.
func spViews[T Float](v *sparse.Vector[T], b []byte) bool {
	if len(v.Values) == 0 || len(b) == 0 {
		return len(v.Values) == 0
	}
	at := uintptr(unsafe.Pointer(unsafe.SliceData(v.Values)))
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return at >= lo && at < lo+uintptr(len(b))
}

// planSSARRecursiveDoubling is ssarRecursiveDoubling's schedule for the
// cost model: the fold, then in each round every survivor sends the union
// of its group's supports (merged on arrival), then the unfold.
func planSSARRecursiveDoubling(pl *spPlan, p, dim int, w spWire, sup spSupports) {
	g := newFoldedGroup(p)
	// A partial sum of several ranks is dense in memory once the
	// kernels' rule says so; an input sent in the fold is as given.
	// Each merge reads the rank's own partial as well as the one it
	// received (sparse.Add of both, as merge reports it): the sender's
	// message is its own partial, which it merges too. A rank whose
	// partial is held in its encoding (held, see rdPartial) sends it
	// without encoding it.
	held := make([]bool, p)
	// send returns the message's in-memory bytes and whether it goes
	// dense and is dense in memory.
	send := func(from, to int, k float64, group []int, reduce float64) (mem float64, dense, memDense bool) {
		idx := spIdx(w, sup, group, 0, dim)
		memDense = len(group) > 1 && sparse.PreferDense(int(math.Round(k)), dim, w.s)
		b, dense := w.msg(k, dim, idx, memDense)
		mem = w.mem(k, dim, b, dense)
		pl.msg(from, to, b, mem, reduce)
		pl.indexCodec(from, to, w.codecSecs(k, dim, idx, memDense))
		if held[from] {
			pl.memSent[from] -= mem
		}
		return mem, dense, memDense
	}
	if g.extra > 0 {
		for r := 0; r < 2*g.extra; r += 2 {
			_, held[r+1], _ = send(r, r+1, sup.count(r, 0, dim), []int{r}, 1)
			k := sup.count(r+1, 0, dim)
			b, dense := w.msg(k, dim, spIdx(w, sup, []int{r + 1}, 0, dim), false)
			pl.red[r+1] += w.mem(k, dim, b, dense)
		}
		pl.endPhase()
	}
	sentDense, ownDense := make([]bool, p), make([]bool, p)
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
				var mem float64
				mem, sentDense[from], ownDense[from] = send(from, g.oldRank(n^d), k, group, 1)
				pl.red[from] += mem
			}
		}
		for n := range g.pof2 {
			r := g.oldRank(n)
			held[r] = rdHolds(held[r], sentDense[g.oldRank(n^d)], ownDense[r], w.packed)
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

// rdHolds says whether a rank's partial is held in its encoding after a
// round of rdPartial.merge: when the partner's arrived dense (it takes
// this rank's in place), or when this rank's own partial was dense in
// memory, merged in place and either held already or, with raw indices,
// viewed in the encoding it was sent in.
func rdHolds(held, inDense, ownDense, packed bool) bool {
	return inDense || (ownDense && (held || !packed))
}
