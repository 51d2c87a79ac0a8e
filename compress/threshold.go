package compress

// Threshold selections: instead of finding the k-th largest magnitude
// exactly, take a threshold t from elsewhere and send every entry whose
// magnitude is at least t. One pass over the input (gatherAtLeast) does
// the selection; its count lands near k when t is a good estimate, and
// when it does not the selection is repaired:
//
//   - more than hi = k(1+tol) but at most candidateFactor*k: the gathered
//     entries contain the exact top k, which is selected among them (no
//     further pass over the input);
//   - fewer than lo = k(1-tol): another threshold (Sampled) or exact top-k
//     (Reuse, or Sampled when its corrections are spent);
//   - more than candidateFactor*k: the pass stops early, as the count is
//     hopeless, and likewise.
//
// Sampled (Deep Gradient Compression) estimates t as the matching order
// statistic of a random sample; Reuse (Ok-Topk) keeps the exact threshold
// of an earlier step.

import (
	"math"

	"github.com/sparcml/sparcml/internal/vec"
)

// gatherChunk is how many entries gatherAtLeast scans between checks of
// its count against the limit.
const gatherChunk = 4096

// gatherAtLeast appends to dst the indices of the entries whose magnitude
// key is at least t (t >= 1) and returns them with ok. It stops early,
// with ok false, once more than limit are found, and then also returns
// how many entries it scanned.
//
// Hits are rare at the densities of gradient compression, so the scan
// tests eight entries with one branch: m >= t exactly when m + (2^b - t)
// carries into bit b (m and t below 2^b, b the magnitude's width), so the
// OR of the eight sums has that bit set exactly when one of them is a
// hit, and only then are the eight looked at one by one. Three integer
// operations per entry and no branch to mispredict but per group: faster
// than a branch per entry (BenchmarkSampled). float32 keys go through
// vec's AVX2 scan instead where the CPU has it, 32 entries a compare.
func gatherAtLeast[K key](dst []uint32, keys []K, t K, limit int) (_ []uint32, ok bool, scanned int) {
	base := len(dst)
	mask := absMask[K]()
	b := magBits[K]()
	c := K(1)<<b - t
	for lo := 0; lo < len(keys); lo += gatherChunk {
		blk := keys[lo:min(lo+gatherChunk, len(keys))]
		if b == 31 && vec.HasAtLeast32 {
			dst = vec.AppendAtLeast32(dst, keys32(blk), uint32(t), uint32(lo))
			if len(dst)-base > limit {
				return dst[:base], false, lo + len(blk)
			}
			continue
		}
		i := 0
		for ; i+8 <= len(blk); i += 8 {
			g := blk[i : i+8 : i+8]
			hits := (g[0]&mask + c) | (g[1]&mask + c) | (g[2]&mask + c) | (g[3]&mask + c) |
				(g[4]&mask + c) | (g[5]&mask + c) | (g[6]&mask + c) | (g[7]&mask + c)
			if hits>>b != 0 {
				for j, v := range g {
					if v&mask >= t {
						dst = append(dst, uint32(lo+i+j))
					}
				}
			}
		}
		for ; i < len(blk); i++ {
			if blk[i]&mask >= t {
				dst = append(dst, uint32(lo+i))
			}
		}
		if len(dst)-base > limit {
			return dst[:base], false, lo + len(blk)
		}
	}
	return dst, true, len(keys)
}

// kthLargest returns the k-th largest (1-based) of the magnitude keys
// sample (sign bits clear), by radix selection over the sample.
func kthLargest[K key](s *scratch, sample []K, k int) K {
	hist := s.histogram()
	sh := magBits[K]() + 1 - digitBits
	for _, v := range sample {
		hist[uint16((v<<1)>>sh)]++
	}
	top, above := boundary(hist[:], k)
	t, _ := resolveDigits(s, sample, nil, K(top), k-above, magBits[K]()-digitBits)
	return t
}

// bounds returns the counts accepted for a target k: [lo, hi].
func bounds(k int, tol float64) (lo, hi int) {
	return int(math.Floor(float64(k) * (1 - tol))), int(math.Ceil(float64(k) * (1 + tol)))
}

// atThreshold selects every entry at or above threshold key t, repairing
// the count as the file's comment says. It reports ok false, with dst
// unchanged, when the count is below lo or the pass stopped early; est is
// then an estimate of how many entries are at or above t.
func atThreshold[K key](s *scratch, dst []uint32, keys []K, k int, t K, tol float64, r *Result) (_ []uint32, ok bool, est float64) {
	base := len(dst)
	dst, ok, scanned := gatherAtLeast(dst, keys, t, gatherLimit(k, tol))
	return settleThreshold(s, dst, base, keys, k, t, tol, r, ok, scanned)
}

// gatherLimit is the most entries atThreshold gathers for a target k.
func gatherLimit(k int, tol float64) int {
	_, hi := bounds(k, tol)
	return max(hi, candidateFactor*k)
}

// settleThreshold is atThreshold after its pass, which appended to
// dst[:base] (ok) or stopped after scanned entries (not ok).
func settleThreshold[K key](s *scratch, dst []uint32, base int, keys []K, k int, t K, tol float64, r *Result, ok bool, scanned int) (_ []uint32, _ bool, est float64) {
	lo, hi := bounds(k, tol)
	if !ok {
		return dst, false, float64(gatherLimit(k, tol)+1) * float64(len(keys)) / float64(scanned)
	}
	c := len(dst) - base
	switch {
	case c > hi:
		kept, tk := topKOfList(s, keys, dst[base:], k)
		r.Count, r.Threshold, r.Exact = len(kept), magnitudeOf(tk), true
		return dst[:base+len(kept)], true, float64(c)
	case c < lo && t > 1:
		return dst[:base], false, float64(c)
	}
	// Within the tolerance, or every nonzero entry (t == 1), which is
	// the exact selection when there are fewer than k.
	r.Count, r.Threshold, r.Exact = c, magnitudeOf(t), t == 1
	if t == 1 {
		r.Threshold = 0
	}
	return dst, true, float64(c)
}

// sampled is the Sampled selection: a stratified sample of m entries (one
// at a random position in each of m equal blocks), the threshold that
// would select k*m/n of them, then atThreshold; on a miss, the sample
// rank is scaled by k over the estimated count and the sample's new
// order statistic tried, at most p.Adjustments times, before falling back
// to exact top-k.
func sampled[K key](s *scratch, dst []uint32, keys []K, k int, p *Config, seed uint64, r *Result) []uint32 {
	n := len(keys)
	m, worth := sampleSize(n, k, p)
	if !worth {
		return exact(s, dst, keys, k, r) // sampling would not save a pass
	}
	sample := drawSample(s, n, m, seed, func(i int) K { return keys[i] })
	return sampledTries(s, dst, keys, k, p, sample, r, nil)
}

// sampleSize is the size of sampled's sample of n entries for k, and
// whether sampling is worth a pass (it is not when k >= n or the sample
// is a quarter of the input).
func sampleSize(n, k int, p *Config) (m int, worth bool) {
	m = max(int(math.Ceil(p.SampleFraction*float64(n))), minSample,
		int(math.Ceil(minSampleRank*float64(n)/float64(k))))
	return m, k < n && 4*m < n
}

// drawSample draws sampled's stratified sample of m magnitude keys (one
// at a random position in each of m equal blocks of the n entries) from
// seed; key(i) is entry i's key.
func drawSample[K key](s *scratch, n, m int, seed uint64, key func(int) K) []K {
	sample := sampleKeys[K](s, m)
	block := n / m
	rng := newRNG(seed)
	mask := absMask[K]()
	for j := range sample {
		sample[j] = key(j*block+int(rng.below(uint64(block)))) & mask
	}
	return sample
}

// sampledTries is sampled once the sample is drawn: the threshold of
// the sample's order statistic, corrected on a miss. first, when not
// nil, runs the first try's atThreshold (fused with the pass that
// updates keys, accumulateThreshold).
func sampledTries[K key](s *scratch, dst []uint32, keys []K, k int, p *Config, sample []K, r *Result, first func(t K) ([]uint32, bool, float64)) []uint32 {
	n, m := len(keys), len(sample)
	rank := max(1, int(math.Ceil(float64(k)*float64(m)/float64(n))))
	for try := 0; ; try++ {
		t := max(kthLargest(s, sample, rank), 1)
		var out []uint32
		var ok bool
		var est float64
		if try == 0 && first != nil {
			out, ok, est = first(t)
		} else {
			out, ok, est = atThreshold(s, dst, keys, k, t, p.Tolerance, r)
		}
		if ok {
			return out
		}
		if try >= p.Adjustments {
			break
		}
		next := rank * 4
		if est > 0 {
			next = int(math.Round(float64(rank) * float64(k) / est))
		}
		if next = min(max(next, 1), m); next == rank {
			break // the sample cannot say more
		}
		rank = next
	}
	dst = exact(s, dst, keys, k, r)
	r.Fallback = true
	return dst
}

// reuse is the Reuse selection: the exact top-k threshold of an earlier
// step, recomputed exactly every p.ReuseSteps steps and whenever the count
// misses the tolerance.
func reuse[K key](s *scratch, dst []uint32, keys []K, k int, p *Config, st *State, r *Result) []uint32 {
	if !reusable(st, p, k, len(keys)) {
		return reuseExact(s, dst, keys, k, st, r)
	}
	out, ok, _ := atThreshold(s, dst, keys, k, keyAtLeast[K](st.threshold), p.Tolerance, r)
	return reuseSettle(s, dst, out, ok, keys, k, st, r)
}

// reusable says whether reuse tries the kept threshold on n entries.
func reusable(st *State, p *Config, k, n int) bool {
	return st.age > 0 && st.age < p.ReuseSteps && k < n
}

// reuseSettle is reuse after atThreshold returned out and ok: out, or
// the exact selection appended to dst on a miss.
func reuseSettle[K key](s *scratch, dst, out []uint32, ok bool, keys []K, k int, st *State, r *Result) []uint32 {
	if !ok {
		r.Fallback = true
		return reuseExact(s, dst, keys, k, st, r)
	}
	st.age++
	if r.Exact {
		st.threshold, st.age = r.Threshold, 1 // an exact recomputation, for free
	}
	return out
}

// reuseExact is reuse's exact selection, whose threshold it keeps.
func reuseExact[K key](s *scratch, dst []uint32, keys []K, k int, st *State, r *Result) []uint32 {
	dst = exact(s, dst, keys, k, r)
	st.threshold, st.age = r.Threshold, 1
	return dst
}

// exact is the exact top-k as a selection result.
func exact[K key](s *scratch, dst []uint32, keys []K, k int, r *Result) []uint32 {
	if k <= 0 {
		*r = nothing
		return dst
	}
	base := len(dst)
	dst, t := topK(s, dst, keys, k)
	r.Count, r.Threshold, r.Exact = len(dst)-base, magnitudeOf(t), true
	return dst
}

// nothing is the result of a selection of k <= 0 entries.
var nothing = Result{Threshold: math.Inf(1), Exact: true}

// minSample is the smallest sample Sampled draws, and minSampleRank the
// fewest sampled entries it wants above the threshold: the count a
// sample's order statistic r predicts is off by about 1/sqrt(r) of
// itself, so with 100 the default tolerance is two standard deviations.
// When the sample this takes is a quarter of the input, the exact
// selection is cheaper than sampling and a pass.
const (
	minSample     = 1024
	minSampleRank = 100
)

// sampleKeys returns s's sample buffer of m keys of type K.
func sampleKeys[K key](s *scratch, m int) []K {
	if magBits[K]() == 31 {
		if cap(s.sample32) < m {
			s.sample32 = make([]uint32, m)
		}
		return any(s.sample32[:m]).([]K)
	}
	if cap(s.sample64) < m {
		s.sample64 = make([]uint64, m)
	}
	return any(s.sample64[:m]).([]K)
}
