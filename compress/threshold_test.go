package compress

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkAtThreshold checks a threshold selection: exactly the entries of
// magnitude at least r.Threshold, in index order, their number within
// the tolerance of k, or the exact top k when the result says so.
func checkAtThreshold[T Float](t *testing.T, x []T, k int, tol float64, got []uint32, r Result) {
	t.Helper()
	require.Equal(t, len(got), r.Count)
	if r.Exact {
		checkExactTopK(t, x, k, got, r.Threshold)
		return
	}
	lo, hi := bounds(k, tol)
	require.GreaterOrEqual(t, r.Count, lo, "count below the tolerance")
	require.LessOrEqual(t, r.Count, hi, "count above the tolerance")
	var want []uint32
	for i, v := range x {
		if m := math.Abs(float64(v)); m >= r.Threshold && m != 0 || math.IsNaN(m) {
			want = append(want, uint32(i))
		}
	}
	require.Equal(t, want, got)
}

// checkExactTopK checks that got is the top k of x by the definition, in
// one pass instead of refTopK's sort: min(k, nonzero) increasing indices,
// none of them zero, all at or above the threshold th and every other
// entry at or below it, and among the entries equal to th the selected
// ones are the lowest indices.
func checkExactTopK[T Float](t *testing.T, x []T, k int, got []uint32, th float64) {
	t.Helper()
	nonzero := 0
	for _, v := range x {
		if v != 0 {
			nonzero++
		}
	}
	require.Len(t, got, min(k, nonzero))
	require.True(t, slices.IsSorted(got))
	checkThreshold(t, x, got, th, false)
	j, skipped := 0, false // skipped: an entry equal to th was left out
	for i, v := range x {
		in := j < len(got) && got[j] == uint32(i)
		if in {
			j++
			require.NotZero(t, v, "zero entry %d selected", i)
		}
		if m := math.Abs(float64(v)); m == th && m != 0 {
			if in && skipped {
				t.Fatalf("entry %d equal to the threshold selected after a lower one was left out", i)
			}
			skipped = skipped || !in
		}
	}
}

func TestSampledWithinTolerance(t *testing.T) {
	testSampledWithinTolerance[float32](t)
	testSampledWithinTolerance[float64](t)
}

func testSampledWithinTolerance[T Float](t *testing.T) {
	const n = 200_000
	rng := rand.New(rand.NewPCG(3, 4))
	cfg := Config{Method: Sampled}
	s, err := NewSelector[T](cfg)
	require.NoError(t, err)
	x := make([]T, n)
	fallbacks, estimated := 0, 0
	for trial := range 12 {
		for i := range x {
			switch trial % 3 {
			case 0:
				x[i] = T(rng.NormFloat64())
			case 1:
				x[i] = T(rng.ExpFloat64() * rng.ExpFloat64()) // heavy tail
			default:
				// 60 magnitudes, each held by about 1% of the entries:
				// most counts are out of reach of any threshold, and
				// the exact fallback must step in.
				x[i] = T(math.Ldexp(1, -rng.IntN(30)) * float64(i%3))
			}
		}
		for _, k := range []int{n / 1000, n / 100, n / 20} {
			got, r := s.Sampled(nil, x, k, uint64(trial))
			checkAtThreshold(t, x, k, DefaultTolerance, got, r)
			if r.Fallback && trial%3 != 2 {
				fallbacks++
			}
			if !r.Exact {
				estimated++
			}
		}
	}
	// The estimate is good on data without ties: falling back there
	// would mean the sample or the adjustment does not work.
	t.Logf("%T: %d fallbacks without ties, %d selections by the estimate", x, fallbacks, estimated)
	require.LessOrEqual(t, fallbacks, 1)
	require.GreaterOrEqual(t, estimated, 12, "the estimate was hardly used")
}

// TestSampledFallback: when every entry is equal no threshold lands near
// k, and the exact selection (the k lowest indices) must come out.
func TestSampledFallback(t *testing.T) {
	const n = 100_000
	x := make([]float32, n)
	for i := range x {
		x[i] = 0.5
	}
	s, _ := NewSelector[float32](Config{Method: Sampled})
	got, r := s.Sampled(nil, x, 1000, 9)
	require.True(t, r.Fallback)
	require.True(t, r.Exact)
	require.Equal(t, refTopK(x, 1000), got) // the first 1000

}

// TestSampledFewNonzero: fewer nonzero entries than k; the threshold
// falls to the smallest nonzero magnitude and every nonzero entry is
// selected, exactly and without a fallback.
func TestSampledFewNonzero(t *testing.T) {
	const n = 200_000
	x := make([]float64, n)
	rng := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		x[rng.IntN(n)] = rng.NormFloat64()
	}
	s, _ := NewSelector[float64](Config{Method: Sampled})
	got, r := s.Sampled(nil, x, 2000, 1)
	require.False(t, r.Fallback)
	require.True(t, r.Exact)
	require.Equal(t, refTopK(x, 2000), got)
	require.Equal(t, 0.0, r.Threshold)
}

// TestSampledRepairsOvershoot: a threshold that selects too many, but
// fewer than candidateFactor*k, is repaired among the gathered entries
// into the exact top k. Forced here with a tiny tolerance, which a
// sample of this size cannot meet.
func TestSampledRepairsOvershoot(t *testing.T) {
	const n = 300_000
	rng := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	s, _ := NewSelector[float32](Config{Method: Sampled, Tolerance: 1e-6, Adjustments: 1})
	exactly := 0
	for seed := range uint64(10) {
		got, r := s.Sampled(nil, x, 3000, seed)
		checkAtThreshold(t, x, 3000, 1e-6, got, r)
		if r.Exact && !r.Fallback {
			exactly++
		}
	}
	require.Positive(t, exactly, "no overshoot was repaired among the gathered entries")
}

func TestReuse(t *testing.T) {
	const n, k, steps = 100_000, 1000, 4
	rng := rand.New(rand.NewPCG(9, 10))
	s, _ := NewSelector[float32](Config{Method: Reuse, ReuseSteps: steps})
	var st State
	x := make([]float32, n)
	scale := 1.0
	var first float64
	for step := range 3 * steps {
		if step == 2*steps+2 {
			scale = 10 // the reused threshold now selects far too many
		}
		for i := range x {
			x[i] = float32(scale * rng.NormFloat64())
		}
		got, r := s.Select(nil, x, k, &st)
		checkAtThreshold(t, x, k, DefaultTolerance, got, r)
		switch {
		case step%steps == 0 && step <= 2*steps:
			require.True(t, r.Exact, "step %d recomputes", step)
			require.False(t, r.Fallback, "step %d", step)
			first = r.Threshold
		case step == 2*steps+2:
			require.True(t, r.Fallback, "step %d: the count misses", step)
			require.True(t, r.Exact)
		case step < 2*steps+2:
			require.False(t, r.Exact, "step %d reuses", step)
			require.Equal(t, first, r.Threshold, "step %d reuses the threshold", step)
		}
	}
}

func TestSelectZeroK(t *testing.T) {
	x := []float32{1, 2, 3}
	for m := range Method(4) {
		s, _ := NewSelector[float32](Config{Method: m})
		var st State
		got, r := s.Select(nil, x, 0, &st)
		require.Empty(t, got, "%v", m)
		require.Zero(t, r.Count)
	}
}
