package collectives

import (
	"fmt"
	"slices"

	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// The counts exchange that carries the reduce-scatter (AlgoAuto, exact
// values, equal ranges, the exchange in one round: spDirectAgree).
//
// In the one-round exchange every rank sends every other a message of its
// own, so the message to rank q can carry, behind the record, the
// sender's slice of q's equal range: the message ssar-split and DSAR send
// q first (scatterToOwners). When every rank carried its slices and auto
// chooses ssar-split or DSAR on equal ranges, the reduce-scatter has
// arrived with the records and the algorithm starts at its owners' sums,
// one round earlier than forced.
//
// Schedule: one round. Rank r sends rank q one message: its record (48 +
// 4 q_r bytes, sparse_agree.go) followed by its slice of q's equal range
// in the smaller raw encoding (16 + min(k_rq c, n_q s) bytes), so P-1
// messages and (P-1)(48 + 4 q_r) + about k_r c (P-1)/P + 16 (P-1) bytes a
// rank: the records' bytes plus the scatter's, in the messages of the
// records. A rank that does not carry sends its record alone.
//
// Which ranks carry is each rank's own decision (spCarries, from its count
// and the options), stated in its record (spFlagCarries), which every rank
// receives: every rank therefore knows alike whether all carried. Slices
// that the choice does not use (another algorithm, balanced ranges) are
// sent for nothing; spCarries bounds their bytes by one round's latency,
// what the round they save when used is worth. In simulated time at 8
// ranks and 0.1% of 256K, auto took 1.13x (10 Gbit/s) and 1.15x (100
// Gbit/s) forced ssar-split with the exchange a round of its own
// (docs/SIMULATION.md, "Auto against the best forced algorithm").

// spMayCarry says whether the counts exchange of a call with opts on p
// ranks is the carrying one (exchangeCarrying): AlgoAuto with exact
// values and equal ranges asked (not Balanced, indices not forced
// packed), the exchange in one round. It follows from what every rank
// passes alike, so every rank exchanges the same way.
func spMayCarry(m CostModel, opts SparseOptions, p int) bool {
	return opts.Algo == AlgoAuto && !opts.Balanced && opts.Quant.Lossless() && opts.Indices != IndexPacked && spDirectAgree(m, p)
}

// spCarries says whether rank me, whose slices of the equal ranges take
// size[q] bytes each, carries them in such an exchange: when they are
// worth no more than one round's Latency, both as what this rank spends
// on them (their bytes at Beta and their encoding, sparseCodecFactor
// Gamma a byte, as the model charges every sparse message) and as the
// bytes its largest slice would make an owner receive at Beta if every
// rank sent that owner as many. Slices that the choice does not use then
// cost at most the round that slices it uses save. In simulated time
// (`sparcml sim -n 8 --op sparse-allreduce --sizes 256K --dist powerlaw
// --indices raw --algo auto`): with no bound on the encoding, at 1% on
// 100 Gbit/s, where some ranks carried and auto ran DSAR's own scatter,
// auto took 191 us against 179 with no slices carried; with no bound on
// the owner's bytes, at 0.1% on 10 Gbit/s, where every rank carried and
// auto balanced ssar-split's ranges, 58 us against 51.
func spCarries(m CostModel, opts SparseOptions, me int, size []int) bool {
	p := len(size)
	if !spMayCarry(m, opts, p) {
		return false
	}
	if m == (CostModel{}) {
		m = DefaultCostModel
	}
	total, largest := 0, 0
	for q, n := range size {
		if q != me {
			total += n
			largest = max(largest, n)
		}
	}
	sender := float64(total) * (m.Beta + sparseCodecFactor*m.Gamma)
	owner := float64((p-1)*largest) * m.Beta
	return max(sender, owner) <= m.latency()
}

// spSliceSizes are the sizes of v's slices of the p equal ranges in the
// smaller raw encoding behind a header of hdr bytes: hdr + min(k c, n s)
// for a slice of k entries over n positions.
func spSliceSizes[T Float](v *sparse.Vector[T], p, hdr int) []int {
	eq := spEqualBounds(v.Dim, p)
	es := v.EntrySize()
	size := make([]int, p)
	for q := range p {
		n := eq[q+1] - eq[q]
		k := n
		if !v.Dense {
			lo, hi := v.RangeBounds(eq[q], eq[q+1])
			k = hi - lo
		}
		size[q] = hdr + min(k*(sparse.IndexSize+es), n*es)
	}
	return size
}

// exchangeCarrying is the one-round exchange of this rank's record rec,
// each message carrying this rank's slice of the receiver's equal range
// when carry is set. It returns every rank's record (recs[Rank()] is
// rec), the rest of every received message (the sender's slice of this
// rank's range, or nothing; tails[Rank()] is nil) and the slices' bytes
// this rank sent. Both alias received messages, kept in c.sc.
func (c *spCall[T]) exchangeCarrying(rec []byte, carry bool) (recs, tails [][]byte, carried int64, err error) {
	eq := spEqualBounds(c.in.Dim, c.p)
	buf := c.sc.get((c.p-1)*(len(rec)+sparse.BlockHeaderSize) + c.compactSize(c.in.NNZ(), c.in.Dim))[:0]
	start, end := make([]int, c.p), make([]int, c.p)
	for i := 1; i < c.p; i++ {
		q := (c.rank + i) % c.p
		start[q] = len(buf)
		buf = append(buf, rec...)
		if carry {
			if buf, err = c.encode(buf, c.in, eq[q], eq[q+1]); err != nil {
				return nil, nil, 0, err
			}
		}
		end[q] = len(buf)
	}
	c.sc.keep(buf)
	carried = int64(len(buf) - (c.p-1)*len(rec))

	// Posted, sent and waited for in spAllgatherDirect's order, so that
	// an exchange that carries nothing is that exchange.
	reqs := make([]*transport.Request, c.p)
	guess := len(rec) + c.compactSize(c.in.NNZ()/c.p, eq[1]-eq[0])
	for i := 1; i < c.p; i++ {
		q := (c.rank + i) % c.p
		reqs[q] = c.recv(q, spStepAgree, guess)
	}
	sends := make([]*transport.Request, 0, c.p-1)
	for i := 1; i < c.p; i++ {
		q := (c.rank - i + c.p) % c.p
		sends = append(sends, c.op.Send(q, spStepAgree, buf[start[q]:end[q]]))
	}
	recs, tails = make([][]byte, c.p), make([][]byte, c.p)
	recs[c.rank] = rec
	for i := 1; i < c.p; i++ {
		q := (c.rank + i) % c.p
		msg, err := c.data(reqs[q])
		if err != nil {
			return nil, nil, 0, err
		}
		if recs[q], tails[q], err = spSplitCarrying(msg); err != nil {
			return nil, nil, 0, c.op.Fail(errSparseProtocol(c.op.commRank(q), "agreement message of %d bytes: %v", len(msg), err))
		}
	}
	if err := c.op.Wait(sends...); err != nil {
		return nil, nil, 0, err
	}
	return recs, tails, carried, nil
}

// spSplitCarrying splits a message of the carrying exchange into the
// record and what follows it: nothing, or exactly one encoded vector.
func spSplitCarrying(msg []byte) (rec, tail []byte, err error) {
	n, err := spRecordSize(msg)
	if err != nil {
		return nil, nil, err
	}
	rec, tail = msg[:n], msg[n:]
	if len(tail) == 0 {
		return rec, nil, nil
	}
	if m, err := sparse.EncodedLen(tail); err != nil || m != len(tail) {
		return nil, nil, fmt.Errorf("a slice of %d bytes behind the record: %v", len(tail), err)
	}
	return rec, tail, nil
}

// useCarried keeps the slices carried by the counts exchange for the
// scatter of plan pl when they are its scatter: every rank carried (ag
// holds the slices), exact values, and pl runs ssar-split or DSAR on equal
// ranges. Every rank decides alike: all of it follows from the records.
func (c *spCall[T]) useCarried(ag *spAgreement, pl *SparsePlan) {
	if ag.slices == nil || c.q != nil || !isSplitAlgo(pl.algo) || !slices.Equal(pl.bounds, spEqualBounds(c.in.Dim, c.p)) {
		return
	}
	c.carried = ag.slices
}

// carriedParts is scatterToOwners when the counts exchange carried the
// scatter: the P slices of this rank's range, parts[q] from rank q.
func (c *spCall[T]) carriedParts() ([]*sparse.Vector[T], error) {
	lo, hi := c.bounds[c.rank], c.bounds[c.rank+1]
	parts := make([]*sparse.Vector[T], c.p)
	parts[c.rank] = c.ownSlice(lo, hi)
	for q, b := range c.carried {
		if q == c.rank {
			continue
		}
		var err error
		if parts[q], err = c.received(b, q, hi-lo); err != nil {
			return nil, err
		}
	}
	return parts, nil
}

// spCarriedSent is, for PredictSparseExact, the bytes of the slices each
// rank carries in the counts exchange (0 for a rank that does not) and
// whether every rank carries.
func spCarriedSent[T Float](m CostModel, opts SparseOptions, inputs []*sparse.Vector[T], hdr int) ([]float64, bool) {
	p := len(inputs)
	carried, all := make([]float64, p), true
	for r, v := range inputs {
		size := spSliceSizes(v, p, hdr)
		if !spCarries(m, opts, r, size) {
			all = false
			continue
		}
		for q, n := range size {
			if q != r {
				carried[r] += float64(n)
			}
		}
	}
	return carried, all
}

// spScatterSent is the bytes each rank sends in the scatter to owners of
// a split algorithm on wire w and ranges bounds.
func spScatterSent(m CostModel, p int, w spWire, sup spSupports, bounds []int) []float64 {
	pl := newSpPlan(m, p)
	planScatterToOwners(pl, p, w, sup, bounds, 0)
	return pl.totalSent
}
