package compress

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// refTopK is the reference selection, written from the definition: sort
// every nonzero entry by magnitude, largest first (NaN above +Inf), ties
// by increasing index; keep the first k; return them in index order.
func refTopK[T Float](x []T, k int) []uint32 {
	return firstK(refOrder(x), k)
}

// firstK returns the first k of order, increasing.
func firstK(order []uint32, k int) []uint32 {
	idx := slices.Clone(order[:max(0, min(k, len(order)))])
	slices.Sort(idx)
	return idx
}

// refOrder is refTopK's ranking of the nonzero entries.
func refOrder[T Float](x []T) []uint32 {
	type entry struct {
		mag float64 // NaN as +Inf
		nan bool
		i   uint32
	}
	var es []entry
	for i, v := range x {
		if v != 0 {
			m := math.Abs(float64(v))
			nan := math.IsNaN(m)
			if nan {
				m = math.Inf(1)
			}
			es = append(es, entry{m, nan, uint32(i)})
		}
	}
	// A total order (the index breaks ties), so the sort is deterministic.
	slices.SortFunc(es, func(a, b entry) int {
		switch {
		case a.nan != b.nan:
			if a.nan {
				return -1
			}
			return 1
		case a.mag > b.mag:
			return -1
		case a.mag < b.mag:
			return 1
		}
		return int(a.i) - int(b.i)
	})
	idx := make([]uint32, len(es))
	for j, e := range es {
		idx[j] = e.i
	}
	return idx
}

// gradients of the shapes the tests cover, by name.
func testInputs[T Float](rng *rand.Rand, n int) map[string][]T {
	normal := make([]T, n)
	ties := make([]T, n)
	sparse := make([]T, n)
	special := make([]T, n)
	for i := range normal {
		normal[i] = T(rng.NormFloat64())
		ties[i] = T(rng.IntN(7) - 3) // many equal magnitudes, zeros, both signs
		if rng.IntN(50) == 0 {
			sparse[i] = T(rng.NormFloat64())
		}
		switch rng.IntN(10) {
		case 0:
			special[i] = T(math.NaN())
		case 1:
			special[i] = T(math.Inf(1 - 2*rng.IntN(2)))
		case 2:
			special[i] = T(math.Copysign(0, -1))
		case 3:
			special[i] = T(math.SmallestNonzeroFloat32 * float64(rng.IntN(4)))
		default:
			special[i] = T(rng.NormFloat64() * 1e-30)
		}
	}
	return map[string][]T{"normal": normal, "ties": ties, "sparse": sparse,
		"special": special, "zero": make([]T, n)}
}

func TestTopKAgainstSort(t *testing.T) {
	testTopKAgainstSort[float32](t)
	testTopKAgainstSort[float64](t)
}

func testTopKAgainstSort[T Float](t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s, err := NewSelector[T](Config{})
	require.NoError(t, err)
	for _, n := range []int{0, 1, 2, 7, 100, 5000, 100_000} {
		for name, x := range testInputs[T](rng, n) {
			order := refOrder(x)
			for _, k := range []int{0, 1, 2, n / 100, n / 10, n / 2, n - 1, n, n + 3} {
				got, r := s.TopK([]uint32{42}, x, k) // appends after what dst holds
				require.Equal(t, uint32(42), got[0])
				want := nonNil(firstK(order, k))
				if !slices.Equal(want, got[1:]) {
					require.Equal(t, want, nonNil(got[1:]), "%T %s n=%d k=%d", x, name, n, k)
				}
				require.Equal(t, len(want), r.Count)
				require.True(t, r.Exact)
				checkThreshold(t, x, got[1:], r.Threshold, false)
			}
		}
	}
}

// TestTopKCrowdedBoundary: more equal magnitudes at the threshold than
// the candidate buffer takes, so the digits are resolved by passes over
// the input (and for several digits in float64).
func TestTopKCrowdedBoundary(t *testing.T) {
	const n = 3 * minCandidates
	for _, k := range []int{1, 10, minCandidates + 5} {
		x := make([]float32, n)
		y := make([]float64, n)
		for i := range x {
			x[i], y[i] = 1, 1
			if i%1000 == 999 {
				x[i], y[i] = 1+1.0/1024, 1+1.0/(1<<40) // close above: same top digit
			}
		}
		s32, _ := NewSelector[float32](Config{})
		s64, _ := NewSelector[float64](Config{})
		got32, _ := s32.TopK(nil, x, k)
		got64, _ := s64.TopK(nil, y, k)
		require.Equal(t, refTopK(x, k), got32, "k=%d", k)
		require.Equal(t, refTopK(y, k), got64, "k=%d", k)
	}
}

// nonNil makes an empty list compare equal to the reference's.
func nonNil(s []uint32) []uint32 {
	if len(s) == 0 {
		return nil
	}
	return s
}

// checkThreshold checks Result.Threshold against the selection sel of x:
// every selected magnitude is at least it and every other at most it
// (below it when strict). NaN entries count as above everything.
func checkThreshold[T Float](t *testing.T, x []T, sel []uint32, th float64, strict bool) {
	t.Helper()
	in := make([]bool, len(x))
	for _, i := range sel {
		in[i] = true
	}
	for i, v := range x {
		m := math.Abs(float64(v))
		if math.IsNaN(m) {
			if th > 0 && len(sel) > 0 && !in[i] {
				t.Fatalf("NaN at %d not selected with threshold %v", i, th)
			}
			continue
		}
		switch {
		case in[i] && m < th:
			t.Fatalf("selected %d has magnitude %v below the threshold %v", i, m, th)
		case !in[i] && (m > th || strict && m == th && m != 0):
			t.Fatalf("left-out %d has magnitude %v above the threshold %v", i, m, th)
		}
	}
}
