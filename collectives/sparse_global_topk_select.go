package collectives

import (
	"math"

	"github.com/sparcml/sparcml/sparse"
)

// The threshold of GlobalTopk: the exact K-th magnitude by radix selection
// over the owners (selectKth), and the estimate the calls in between use
// (GlobalTopkState).

// spStepSelect is the first step of the selection rounds' allreduces, one
// block of 1<<16 steps per round, above every other phase of the op.
const spStepSelect = 1 << 24

// selectKth returns the rule that keeps exactly min(k, nonzero sums)
// entries over every owner's range: the K-th largest magnitude key, found
// 8 bits at a time from the top. Each round counts this owner's keys that
// share the prefix found so far by their next 8 bits, allreduces the 256
// counts, and descends into the bucket holding the K-th key. A bucket
// whose every key is kept ends the search early, at its lowest key.
// Counts are exact (allreduceCounts).
func (c *spCall[T]) selectKth(red *sparse.Vector[T], k int, m CostModel, res *GlobalTopkStats) (globalTopkCut, error) {
	if k == 0 {
		return globalTopkCut{key: math.MaxUint64, quota: 0}, nil
	}
	keys := make([]uint64, 0, len(red.Values))
	for _, x := range red.Values {
		if x != 0 {
			keys = append(keys, magnitudeKeyOf(x))
		}
	}
	width := 8 * sparse.ValueSize[T]()
	need := float64(k)
	var prefix uint64
	hist := make([]float64, 256)
	for shift := width - 8; shift >= 0; shift -= 8 {
		clear(hist)
		for _, key := range keys {
			if key>>(shift+8) == prefix {
				hist[(key>>shift)&255]++
			}
		}
		if err := c.allreduceCounts(hist, res); err != nil {
			return globalTopkCut{}, err
		}
		if shift == width-8 && sumCounts(hist) <= need {
			return globalTopkCut{key: 0, quota: math.MaxInt}, nil // every nonzero sum
		}
		b, above := 255, 0.0
		for ; above+hist[b] < need; b-- {
			above += hist[b]
		}
		need -= above
		prefix = prefix<<8 | uint64(b)
		if hist[b] == need {
			return globalTopkCut{key: prefix << shift, quota: math.MaxInt}, nil
		}
	}
	// prefix is the K-th key itself, held by more entries than the need
	// left: they are kept in index order, owner by owner.
	quota, err := c.tieQuota(keys, prefix, need, m, res)
	return globalTopkCut{key: prefix, quota: quota}, err
}

// tieQuota returns how many of this owner's keys equal to key it keeps:
// the first need entries in index order, owners holding consecutive
// ranges. Each owner needs the ties of the owners before it: the owners
// form groups of G consecutive ranks (tieGroup), every rank learns every
// group's total (an allreduce of P/G counts) and its group's members'
// counts (an allreduce of G counts within the group). With G = P that is
// one allreduce of P counts.
func (c *spCall[T]) tieQuota(keys []uint64, key uint64, need float64, m CostModel, res *GlobalTopkStats) (int, error) {
	mine := 0.0
	for _, x := range keys {
		if x == key {
			mine++
		}
	}
	g := tieGroup(m, c.p, c.countBytes())
	group, lo := c.rank/g, c.rank/g*g
	groups := make([]float64, (c.p+g-1)/g)
	groups[group] = mine
	if len(groups) > 1 {
		if err := c.allreduceCountsOver(spAllRanks(c.p), groups, res); err != nil {
			return 0, err
		}
	}
	members := make([]int, 0, g)
	for r := lo; r < min(lo+g, c.p); r++ {
		members = append(members, r)
	}
	counts := make([]float64, len(members))
	counts[c.rank-lo] = mine
	if err := c.allreduceCountsOver(members, counts, res); err != nil {
		return 0, err
	}
	left := need - sumCounts(groups[:group]) - sumCounts(counts[:c.rank-lo])
	return int(max(0, min(left, mine))), nil
}

// tieGroup is tieQuota's group size: ceil(sqrt P), 2·sqrt P counts in
// two allreduces instead of P in one, when the model predicts that
// cheaper (recursive doubling: ceil(log2 m) rounds of Alpha plus the
// counts' bytes), else P. At 1% of 256K on 10 Gbit/s the one allreduce of
// P counts took longer at 1024 ranks, and the two at 256, whose extra
// rounds cost more than the bytes they save (`sparcml sim -n 256,1024
// --op compress --scope global`, docs/SIMULATION.md).
func tieGroup(m CostModel, p, width int) int {
	g := int(math.Ceil(math.Sqrt(float64(p))))
	cost := func(ranks, counts int) float64 {
		return float64(ceilLog2(ranks)) * (m.Alpha + float64(counts*width)*m.Beta)
	}
	if cost(p, (p+g-1)/g)+cost(g, g) < cost(p, p) {
		return g
	}
	return p
}

// countBytes is the bytes of a count on the wire (allreduceCounts).
func (c *spCall[T]) countBytes() int {
	if c.in.Dim > 1<<24 {
		return 8
	}
	return 4
}

// allreduceCounts sums counts over the ranks, on a view of the op whose
// steps are the round's own. Every count and partial sum is a number of
// sums, at most the dimension, so up to 2^24 entries they travel as
// float32, exactly, in half the bytes.
func (c *spCall[T]) allreduceCounts(counts []float64, res *GlobalTopkStats) error {
	return c.allreduceCountsOver(spAllRanks(c.p), counts, res)
}

// allreduceCountsOver is allreduceCounts among the given ranks (the
// ranks of other groups run the same step among theirs).
func (c *spCall[T]) allreduceCountsOver(ranks []int, counts []float64, res *GlobalTopkStats) error {
	sub := subOpFixed(c.op, ranks, spStepSelect+uint32(res.Rounds)<<16)
	res.Rounds++
	if c.countBytes() == 8 {
		return runAllreduce(sub, counts, Sum, AlgoRecursiveDoubling, segmentElems[float64](sub))
	}
	narrow := make([]float32, len(counts))
	for i, x := range counts {
		narrow[i] = float32(x)
	}
	if err := runAllreduce(sub, narrow, Sum, AlgoRecursiveDoubling, segmentElems[float32](sub)); err != nil {
		return err
	}
	for i, x := range narrow {
		counts[i] = float64(x)
	}
	return nil
}

func sumCounts(h []float64) float64 {
	s := 0.0
	for _, x := range h {
		s += x
	}
	return s
}

// DefaultGlobalTopkPeriod is the number of calls an exact threshold
// serves (itself included) when GlobalTopkState.Period is zero.
const DefaultGlobalTopkPeriod = 8

// ThresholdEstimator says how GlobalTopk sets the threshold of the calls
// between exact ones.
type ThresholdEstimator uint8

const (
	// EstimateHistogram (the default) counts every owner's sums in 256
	// buckets of 1/32 octave around the last threshold (one allreduce of
	// 257 counts, 1 KiB) and keeps the sums above the bucket edge whose
	// count is nearest K; when the K-th sum falls outside the buckets'
	// range (a factor 16 either way) the call selects exactly instead.
	// It follows magnitudes that drift between exact calls, as error
	// feedback makes them do (TestGlobalTopkEstimatorTracksK compares it
	// with EstimateReuse).
	EstimateHistogram ThresholdEstimator = iota
	// EstimateReuse keeps the exact call's threshold until the next, as
	// Ok-Topk does: no communication, but the kept count follows the
	// gradient's magnitudes.
	EstimateReuse
)

func (e ThresholdEstimator) String() string {
	switch e {
	case EstimateHistogram:
		return "histogram"
	case EstimateReuse:
		return "reuse"
	}
	return "estimator(?)"
}

// GlobalTopkState is what GlobalTopk carries from one call to the next:
// the owners' ranges and the threshold estimate. Every rank's state sees
// the same calls and results, so it evolves alike on every rank; keep one
// per tensor. The zero value is ready: its first call is exact.
type GlobalTopkState struct {
	// Period is the number of calls an exact threshold serves (itself
	// included): 1 makes every call exact; 0 means
	// DefaultGlobalTopkPeriod.
	Period int
	// Estimator sets the threshold between exact calls.
	Estimator ThresholdEstimator

	calls     int // since the last exact call, which counts
	k         int
	threshold float64
	bounds    []int
}

// Threshold is the magnitude the next estimated call keeps sums at or
// above.
func (s *GlobalTopkState) Threshold() float64 { return s.threshold }

// Reset makes the next call exact and forgets the estimate.
func (s *GlobalTopkState) Reset() { *s = GlobalTopkState{Period: s.Period, Estimator: s.Estimator} }

// exactDue says whether this call selects exactly: on the first call, once
// a threshold has served Period calls, and when K, the dimension or the
// number of ranks changed.
func (s *GlobalTopkState) exactDue(k, dim, p int) bool {
	period := s.Period
	if period <= 0 {
		period = DefaultGlobalTopkPeriod
	}
	return s.calls == 0 || s.calls >= period || s.k != k || len(s.bounds) != p+1 || s.bounds[p] != dim
}

// update takes in a call's threshold t.
func (s *GlobalTopkState) update(k int, exact bool, t float64) {
	if exact {
		s.calls, s.k = 1, k
	} else {
		s.calls++
	}
	s.threshold = t
}

// estimateBuckets is EstimateHistogram's bucket count, estimateOctave
// the buckets per octave: the range is a factor 2^(256/32/2) = 16 either
// side of the last threshold.
const (
	estimateBuckets = 256
	estimateOctave  = 32
)

// estimateCut is EstimateHistogram: it returns the rule keeping the sums
// at or above the bucket edge whose count over every owner is nearest k,
// or ok false when the k-th sum lies outside the buckets (or there is no
// last threshold), for the caller to select exactly.
func (c *spCall[T]) estimateCut(red *sparse.Vector[T], k int, last float64, res *GlobalTopkStats) (cut globalTopkCut, ok bool, err error) {
	if !(last > 0) || math.IsInf(last, 0) || k == 0 {
		return cut, false, nil
	}
	// edges[j] is the key of last·2^((j-128)/32); counts[j] the keys in
	// [edges[j], edges[j+1]), counts[256] those at or above edges[256].
	var edges [estimateBuckets + 1]uint64
	for j := range edges {
		edges[j] = magnitudeKey[T](last * math.Exp2(float64(j-estimateBuckets/2)/estimateOctave))
	}
	counts := make([]float64, estimateBuckets+1)
	shift := uint(52 - 5) // float64's mantissa bits less log2(estimateOctave)
	if sparse.ValueSize[T]() == 4 {
		shift = 23 - 5
	}
	for _, x := range red.Values {
		if x == 0 {
			continue
		}
		if j := estimateBucket(&edges, magnitudeKeyOf(x), shift); j >= 0 {
			counts[j]++
		}
	}
	if err := c.allreduceCounts(counts, res); err != nil {
		return cut, false, err
	}
	need := float64(k)
	above := counts[estimateBuckets]
	if above > need {
		return cut, false, nil
	}
	for j := estimateBuckets - 1; j >= 0; j-- {
		if above+counts[j] >= need {
			edge := j + 1 // keeps above, fewer than k
			if above+counts[j]-need < need-above {
				edge = j // keeps above+counts[j], nearer k
			}
			return globalTopkCut{key: edges[edge], quota: math.MaxInt}, true, nil
		}
		above += counts[j]
	}
	return cut, false, nil
}

// estimateBucket returns the bucket of key among edges: the first j with
// edges[j] == key, else the last with edges[j] < key (estimateBuckets for
// keys at or above the last edge), or -1 below edges[0]. A magnitude key
// grows with log2 of the magnitude, in steps of 2^-(mantissa bits), to
// within 0.09 of an octave, so (key - edges[mid]) >> shift, with shift the
// mantissa bits less log2(estimateOctave), is within three buckets of the
// answer, which a few comparisons then settle: cheaper per sum than a
// binary search over the 257 edges (BenchmarkEstimateBucket).
func estimateBucket(edges *[estimateBuckets + 1]uint64, key uint64, shift uint) int {
	if key < edges[0] {
		return -1
	}
	const mid = estimateBuckets / 2
	j := mid
	if key >= edges[mid] {
		j += int(min((key-edges[mid])>>shift, estimateBuckets))
	} else {
		j -= int(min((edges[mid]-key)>>shift, mid))
	}
	j = min(j, estimateBuckets)
	for j > 0 && edges[j] > key {
		j--
	}
	for j < estimateBuckets && edges[j+1] <= key {
		j++
	}
	for j > 0 && edges[j-1] == key {
		j--
	}
	return j
}
