package compress

// Exact top-k by radix selection on magnitude keys (see keys.go): one pass
// builds a histogram of the top 16 bits of every magnitude, which says in
// which bin the k-th largest lies and how many entries are above that bin;
// a second pass writes the indices above the bin straight into the output
// and collects the bin's own entries (the candidates). Further 16-bit
// digits are resolved on the candidates alone, so the threshold T and the
// number of entries equal to T still needed are exact after two passes
// over the input. When the boundary bin is too crowded to collect (many
// equal or tiny values: an all-zero layer, for one), each digit is resolved
// by another pass over the input instead, so memory stays O(k) whatever the
// data. The output is in increasing index order, as sparse vectors need:
// the two ordered lists are merged from the back, in place.
//
// Policy, identical for every method: entries whose magnitude is zero are
// never selected (sending them would change nothing); among entries of
// equal magnitude at the threshold the lower indices win; NaN ranks above
// +Inf, so a NaN gradient entry is always sent and, as with a dense
// allreduce, reaches every rank.

const (
	digitBits = 16
	bins      = 1 << digitBits
	// minCandidates is the candidate count always worth collecting, and
	// candidateFactor*k the most collected: beyond that the digits are
	// resolved by passes over the input.
	minCandidates   = 1 << 16
	candidateFactor = 2
)

// scratch holds the buffers a selection reuses across calls.
type scratch struct {
	hist      []uint32 // bins counters
	cand      []uint32 // candidate indices
	sample32  []uint32 // sampled keys (threshold.go)
	sample64  []uint64
	bits      []uint64 // random-k membership bitmap (randk.go)
	found32   []uint32 // keys gathered by the one-pass selection (fused.go)
	found64   []uint64
	positions []uint32 // the top k's positions among them
	onePass   int      // exact selections that took one pass (for tests)
}

func (s *scratch) histogram() *[bins]uint32 {
	if len(s.hist) < bins {
		s.hist = make([]uint32, bins)
	} else {
		clear(s.hist[:bins])
	}
	return (*[bins]uint32)(s.hist[:bins])
}

func (s *scratch) candidates(n int) []uint32 {
	if cap(s.cand) < n {
		s.cand = make([]uint32, n)
	}
	return s.cand[:n]
}

// topK appends to dst the indices, increasing, of the min(k, nonzero)
// entries of largest magnitude, and returns the threshold: the magnitude
// key T of the k-th largest (0 when fewer than k entries are nonzero, so
// that every nonzero entry was selected). Every selected entry has
// magnitude >= T, every entry left out has magnitude <= T. k must be
// positive.
func topK[K key](s *scratch, dst []uint32, keys []K, k int) ([]uint32, K) {
	if len(keys) == 0 {
		return dst, 0
	}
	if k >= len(keys) {
		return appendAbove(dst, keys, 0), 0
	}
	hist := s.histogram()
	topDigits(hist, keys)
	return topKOfHistogram(s, dst, keys, k, hist)
}

// topDigits counts keys by the top digit of their magnitude into hist.
func topDigits[K key](hist *[bins]uint32, keys []K) {
	sh := magBits[K]() + 1 - digitBits // (key<<1)>>sh: top digit of the magnitude
	for _, v := range keys {
		hist[uint16((v<<1)>>sh)]++
	}
}

// topKOfHistogram is topK after its first pass, hist the top digits of
// every key (0 < k < len(keys)).
func topKOfHistogram[K key](s *scratch, dst []uint32, keys []K, k int, hist *[bins]uint32) ([]uint32, K) {
	top, above := boundary(hist[:], k)
	need := k - above
	rest := magBits[K]() - digitBits // magnitude bits below the top digit
	if n := int(hist[top]); n <= max(minCandidates, candidateFactor*k) {
		return topKCandidates(s, dst, keys, K(top), above, need, n, rest)
	}
	t, need := resolveDigits(s, keys, nil, K(top), need, rest)
	return appendAtThreshold(dst, keys, t, need), t
}

// boundary returns the bin holding the k-th largest count (counting from
// the top bin down) and how many counts lie in the bins above it.
func boundary(hist []uint32, k int) (bin, above int) {
	for b := len(hist) - 1; b >= 0; b-- {
		n := int(hist[b])
		if above+n >= k {
			return b, above
		}
		above += n
	}
	return 0, above
}

// topKCandidates is topK's second pass when the boundary bin's n entries
// fit in the candidate buffer.
func topKCandidates[K key](s *scratch, dst []uint32, keys []K, top K, above, need, n int, rest uint) ([]uint32, K) {
	base := len(dst)
	dst = grow(dst, above+need) // the most kept: above, then need ties
	out := dst[base : base+above]
	cand := s.candidates(n)
	partition(keys, top<<rest, rest, out, cand) // above and n entries, as counted
	t, need := resolveDigits(s, keys, cand, top, need, rest)
	kept := keepTop(keys, cand, t, need)
	return mergeBack(dst[:base+above+len(kept)], base, above, kept), t
}

// partition writes, in index order, the indices of the entries whose top
// digit (magnitude >> rest) is above that of t into above and those
// whose top digit equals it into equal, and returns their numbers. t is
// the smallest magnitude of its top digit, so an entry is written exactly
// when its magnitude is at least t: the scan tests eight at a time with
// one branch, as gatherAtLeast does.
func partition[K key](keys []K, t K, rest uint, above, equal []uint32) (a, c int) {
	mask := absMask[K]()
	b := magBits[K]()
	add := K(1)<<b - t
	top := t >> rest
	put := func(i int, m K) {
		if m >= t {
			if m>>rest > top {
				above[a] = uint32(i)
				a++
			} else {
				equal[c] = uint32(i)
				c++
			}
		}
	}
	i := 0
	for ; i+8 <= len(keys); i += 8 {
		g := keys[i : i+8 : i+8]
		m0, m1, m2, m3 := g[0]&mask, g[1]&mask, g[2]&mask, g[3]&mask
		m4, m5, m6, m7 := g[4]&mask, g[5]&mask, g[6]&mask, g[7]&mask
		if ((m0+add)|(m1+add)|(m2+add)|(m3+add)|(m4+add)|(m5+add)|(m6+add)|(m7+add))>>b != 0 {
			for j, v := range g {
				put(i+j, v&mask)
			}
		}
	}
	for ; i < len(keys); i++ {
		put(i, keys[i]&mask)
	}
	return a, c
}

// keepTop compacts the increasing index list in place to the entries
// whose magnitude is above t and the first need equal to t (none when t
// is zero), keeping their order.
func keepTop[K key](keys []K, list []uint32, t K, need int) []uint32 {
	if t == 0 {
		need = 0
	}
	mask := absMask[K]()
	w := 0
	for _, i := range list {
		m := keys[i] & mask
		if m > t || (m == t && need > 0) {
			if m == t {
				need--
			}
			list[w] = i
			w++
		}
	}
	return list[:w]
}

// topKOfList compacts the increasing index list in place to the top k of
// the entries it names, as topK would select among them, and returns the
// threshold.
func topKOfList[K key](s *scratch, keys []K, list []uint32, k int) ([]uint32, K) {
	if k >= len(list) {
		return keepTop(keys, list, 0, 0), 0
	}
	hist := s.histogram()
	sh := magBits[K]() + 1 - digitBits
	for _, i := range list {
		hist[uint16((keys[i]<<1)>>sh)]++
	}
	top, above := boundary(hist[:], k)
	t, need := resolveDigits(s, keys, list, K(top), k-above, magBits[K]()-digitBits)
	return keepTop(keys, list, t, need), t
}

// resolveDigits narrows the threshold from the top digit prefix down to
// the full magnitude key, one 16-bit digit at a time, among the candidate
// indices cand (or over all keys when cand is nil), and returns it with
// the number of entries equal to it that are still to be selected.
func resolveDigits[K key](s *scratch, keys []K, cand []uint32, prefix K, need int, rest uint) (K, int) {
	mask := absMask[K]()
	for rest > 0 {
		d := min(rest, digitBits)
		rest -= d
		hist := s.histogram()
		low := K(1)<<d - 1
		if cand != nil {
			for _, i := range cand {
				if m := keys[i] & mask; m>>(rest+d) == prefix {
					hist[uint16((m>>rest)&low)]++
				}
			}
		} else {
			for _, v := range keys {
				if m := v & mask; m>>(rest+d) == prefix {
					hist[uint16((m>>rest)&low)]++
				}
			}
		}
		b, above := boundary(hist[:1<<d], need)
		need -= above
		prefix = prefix<<d | K(b)
	}
	return prefix, need
}

// appendAbove appends the indices of the entries whose magnitude key is
// above t.
func appendAbove[K key](dst []uint32, keys []K, t K) []uint32 {
	mask := absMask[K]()
	for i, v := range keys {
		if v&mask > t {
			dst = append(dst, uint32(i))
		}
	}
	return dst
}

// appendAtThreshold appends, in index order, every index whose magnitude
// is above t and the first need whose magnitude equals t (none when t is
// zero).
func appendAtThreshold[K key](dst []uint32, keys []K, t K, need int) []uint32 {
	if t == 0 {
		need = 0
	}
	mask := absMask[K]()
	for i, v := range keys {
		m := v & mask
		if m > t {
			dst = append(dst, uint32(i))
		} else if m == t && need > 0 {
			need--
			dst = append(dst, uint32(i))
		}
	}
	return dst
}

// mergeBack merges the increasing lists dst[base:base+a] and b into
// dst[base:], which has room for both, from the back so nothing is
// overwritten before it is read.
func mergeBack(dst []uint32, base, a int, b []uint32) []uint32 {
	i, j := base+a-1, len(b)-1
	for o := len(dst) - 1; j >= 0; o-- {
		if i >= base && dst[i] > b[j] {
			dst[o] = dst[i]
			i--
		} else {
			dst[o] = b[j]
			j--
		}
	}
	return dst
}

// grow returns dst with room for n more elements, as its length plus n.
func grow(dst []uint32, n int) []uint32 {
	l := len(dst)
	if cap(dst)-l < n {
		g := make([]uint32, l, l+n+l/4)
		copy(g, dst)
		dst = g
	}
	return dst[:l+n]
}
