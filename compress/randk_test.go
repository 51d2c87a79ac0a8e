package compress

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRandomKDeterministic(t *testing.T) {
	x := make([]float32, 10_000)
	for i := range x {
		x[i] = 1
	}
	s, _ := NewSelector[float32](Config{Method: Random})
	a, _ := s.RandomK(nil, x, 100, 7)
	b, _ := s.RandomK(nil, x, 100, 7)
	c, _ := s.RandomK(nil, x, 100, 8)
	require.Equal(t, a, b, "same seed, same indices")
	require.NotEqual(t, a, c, "another seed, other indices")
	require.Len(t, a, 100)
	require.True(t, slices.IsSorted(a))
	require.Len(t, slices.Compact(slices.Clone(a)), 100, "distinct")
	// Zero entries are drawn but not sent; k >= n sends every nonzero.
	x[a[0]], x[a[1]] = 0, 0
	d, r := s.RandomK(nil, x, 100, 7)
	require.Equal(t, a[2:], d)
	require.Equal(t, 98, r.Count)
	all, _ := s.RandomK(nil, x, len(x), 1)
	require.Len(t, all, len(x)-2)
}

// TestRandomKUniform: Floyd's algorithm makes every k-subset equally
// likely. Checked with a fixed seed by chi-square statistics of the
// subsets of a small case (C(6,3) = 20 of them) and of the marginal
// frequencies of a larger one, each against the bound mean + 5 standard
// deviations of the chi-square distribution (2 df variance per df): a
// biased sampler (always the first k, say) gives thousands.
func TestRandomKUniform(t *testing.T) {
	s, _ := NewSelector[float64](Config{Method: Random})
	chi2 := func(counts []int, expected float64) float64 {
		var c float64
		for _, n := range counts {
			d := float64(n) - expected
			c += d * d / expected
		}
		return c
	}
	bound := func(df int) float64 { return float64(df) + 5*math.Sqrt(2*float64(df)) }

	ones := func(n int) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = 1
		}
		return x
	}
	const draws = 40_000
	x := ones(6)
	subsets := make(map[[3]uint32]int)
	var dst []uint32
	for d := range uint64(draws) {
		dst, _ = s.RandomK(dst[:0], x, 3, mix(11, d))
		subsets[[3]uint32(dst)]++
	}
	require.Len(t, subsets, 20)
	counts := make([]int, 0, 20)
	for _, c := range subsets {
		counts = append(counts, c)
	}
	require.Less(t, chi2(counts, draws/20.0), bound(19))

	x = ones(500)
	marg := make([]int, len(x))
	for d := range uint64(draws) {
		dst, _ = s.RandomK(dst[:0], x, 25, mix(12, d))
		for _, i := range dst {
			marg[i]++
		}
	}
	require.Less(t, chi2(marg, draws*25.0/500), bound(499))
}
