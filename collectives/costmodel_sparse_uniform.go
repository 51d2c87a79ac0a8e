package collectives

// The scatter to owners on the uniform estimate (spUniform), priced in
// O(P) rather than message by message: AlgoAuto prices it for DSAR and
// ssar-split on every call, on every rank.

// planScatterUniform is planScatterToOwners on the uniform estimate,
// where a slice depends only on its sender and the length of its range:
// each sender's slice is priced once per distinct range length (one or
// two for equal ranges) and each owner receives the sum over all senders
// less its own slice, O(P) where the P^2 messages one by one took half a
// second of each rank's CPU per AlgoAuto call at 1024 ranks (go test
// -bench ChooseSparse ./collectives/).
func planScatterUniform(pl *spPlan, p int, w spWire, u spUniform, bounds []int, reduce float64) []bool {
	lengths, of := spRangeLengths(bounds)
	own := make([]spSlice, p) // rank r's slice of its own range, which it keeps
	for r := range p {
		for i := range lengths {
			l := &lengths[i]
			s := u.slice(w, r, l.n)
			sends := l.ranges
			if of[r] == i {
				sends--
				own[r] = s
			}
			pl.sent[r] += float64(sends) * s.bytes
			pl.memSent[r] += float64(sends) * s.mem
			pl.codec[r] += float64(sends) * s.codec
			pl.phaseMsgs[r] += sends
			l.all.add(s)
		}
	}
	gotDense := make([]bool, p)
	for q := range p {
		all, s := lengths[of[q]].all, own[q]
		pl.recv[q] += all.bytes - s.bytes
		pl.memRecv[q] += all.mem - s.mem
		pl.red[q] += (all.mem - s.mem) * reduce
		pl.codec[q] += all.codec - s.codec
		gotDense[q] = all.dense > s.dense
	}
	pl.endPhase()
	return gotDense
}

// spSlice is a message of the scatter to owners for the cost model (a
// sum of them, dense counting the dense ones).
type spSlice struct {
	bytes, mem, codec float64
	dense             int
}

func (s *spSlice) add(t spSlice) {
	s.bytes += t.bytes
	s.mem += t.mem
	s.codec += t.codec
	s.dense += t.dense
}

// slice is rank r's slice of a range of n positions under the uniform
// estimate.
func (u spUniform) slice(w spWire, r, n int) spSlice {
	k, idx := u.count(r, 0, n), 0.0
	if w.lossy() || w.packed { // as spIdx, without boxing u
		idx = u.indexBytes([]int{r}, 0, n)
	}
	b, dense := w.msg(k, n, idx, false)
	s := spSlice{bytes: b, mem: w.mem(k, n, b, dense), codec: w.codecSecs(k, n, idx, false)}
	if dense {
		s.dense = 1
	}
	return s
}

// spLength is a range length of a split algorithm, how many ranges have
// it, and (planScatterUniform) the sum of every rank's slice of one.
type spLength struct {
	n, ranges int
	all       spSlice
}

// spRangeLengths returns the distinct lengths of the ranges between
// bounds and, for each range, the index of its length.
func spRangeLengths(bounds []int) ([]spLength, []int) {
	var lengths []spLength
	index := map[int]int{}
	of := make([]int, len(bounds)-1)
	for q := range of {
		n := bounds[q+1] - bounds[q]
		i, ok := index[n]
		if !ok {
			i, index[n] = len(lengths), len(lengths)
			lengths = append(lengths, spLength{n: n})
		}
		lengths[i].ranges++
		of[q] = i
	}
	return lengths, of
}
