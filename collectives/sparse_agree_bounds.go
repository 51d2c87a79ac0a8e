package collectives

import (
	"math"
	"math/bits"
	"sort"

	"github.com/sparcml/sparcml/internal/keyheap"
)

// The ranges of the split algorithms from the counts exchange's samples
// (sparse_agree.go): whether the equal ranges are skewed, and balanced
// ranges at the samples' weighted quantiles.

// equalRangesSkewed says whether the samples show the busiest owner of
// equal ranges receiving more than spSkewSlack times the mean share of all
// ranks' entries, beyond the samples' own noise. Each rank's count in a
// range is known from its samples to about one sample's weight w_r =
// nnz[r]/q at either end, an error of variance about w_r^2/6 per rank
// (uniform at both ends), Sum w_r^2/6 in all, and the test asks for three
// standard deviations of it above the slack. On uniform supports balanced
// ranges only add that noise: at 256 ranks and 1% of 256K, 16 samples a
// rank made the busiest balanced owner's share 1.5x the mean and
// ssar-split 1.48x its time on equal ranges (sparcml sim); on a power-law
// support an equal range holds many times the mean and balanced ranges
// halve ssar-split's time (docs/SIMULATION.md). Arithmetic in float64
// with every product rounded (no fused multiply-add), the sums in rank
// order: every rank decides alike.
func (a *spAgreement) equalRangesSkewed(dim, p int) bool {
	eq := spEqualBounds(dim, p)
	load := make([]float64, p)
	var total, noise float64
	for r, s := range a.samples {
		if len(s) == 0 {
			continue
		}
		w := float64(a.nnz[r]) / float64(len(s))
		noise += float64(w * w)
		total += float64(a.nnz[r])
		for _, x := range s {
			i := sort.Search(p, func(j int) bool { return eq[j+1] > int(x) })
			load[i] += w
		}
	}
	limit := float64(spSkewSlack*total/float64(p)) + float64(3*math.Sqrt(noise/6))
	for _, l := range load {
		if l > limit {
			return true
		}
	}
	return false
}

// spSkewSlack is how much more than the mean share of the entries an
// owner of equal ranges may receive before AlgoAuto balances ssar-split's
// ranges: the 1.1x that auto aims to be within of the fastest algorithm.
const spSkewSlack = 1.1

// balancedBounds places the p-1 inner boundaries at the weighted quantiles
// of every rank's samples, a sample of rank r standing for nnz[r]/q entries:
// range i then holds about 1/p of the entries all ranks send. The
// arithmetic is integer (128-bit products), so every rank, whatever its
// architecture, computes the same bounds. With no entries anywhere the
// ranges are equal.
func (a *spAgreement) balancedBounds(dim, p int) []int {
	var total uint64
	for r, s := range a.samples {
		total += uint64(len(s)) * spSampleWeight(a.nnz[r], len(s))
	}
	if total == 0 {
		return spEqualBounds(dim, p)
	}
	// A sample of rank r weighs nnz[r]/q[r] entries (spSampleWeight),
	// as ranks of few entries send fewer samples. Every rank's samples are
	// sorted (spParseRecord checks), so they are merged in index order,
	// ties in rank order, with a heap of keys index<<32 | rank, and only
	// up to the last quantile: the bounds are on the path of every
	// AlgoAuto call, where sorting all samples through a comparison took a
	// tenth of its CPU on 8 ranks (go test -bench SparseAutoOverhead
	// -cpuprofile ./collectives/) and scanning every rank's next sample
	// grows as P^2 (BenchmarkBalancedBounds).
	heads := make([]int, len(a.samples)) // each rank's next sample
	var heap []uint64
	for r, s := range a.samples {
		if len(s) > 0 {
			heap = append(heap, uint64(s[0])<<32|uint64(r))
		}
	}
	keyheap.Init(heap)
	b := make([]int, p+1)
	b[p] = dim
	var cum uint64
	last := -1 // index of the last sample taken
	for i := 1; i < p; i++ {
		// Advance to the first sample at which the cumulated weight
		// reaches i/p of the total: cum*p >= i*total.
		for len(heap) > 0 && spLess128(cum, uint64(p), total, uint64(i)) {
			r := int(uint32(heap[0]))
			last = int(heap[0] >> 32)
			cum += spSampleWeight(a.nnz[r], len(a.samples[r]))
			if heads[r]++; heads[r] < len(a.samples[r]) {
				heap[0] = uint64(a.samples[r][heads[r]])<<32 | uint64(r)
			} else {
				heap[0] = heap[len(heap)-1]
				heap = heap[:len(heap)-1]
			}
			keyheap.Down(heap, 0)
		}
		bound := dim
		if last >= 0 {
			bound = min(last+1, dim)
		}
		b[i] = max(bound, b[i-1])
	}
	return b
}

// spLess128 reports whether a*b < c*d in 128-bit arithmetic.
func spLess128(a, b, c, d uint64) bool {
	h1, l1 := bits.Mul64(a, b)
	h2, l2 := bits.Mul64(c, d)
	return h1 < h2 || (h1 == h2 && l1 < l2)
}
