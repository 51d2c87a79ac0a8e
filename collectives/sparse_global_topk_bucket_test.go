package collectives

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// estimateBucketRef is estimateBucket from its definition, by binary
// search: the first edge equal to key, else the last edge below it, -1
// below every edge.
func estimateBucketRef(edges []uint64, key uint64) int {
	j, found := slices.BinarySearch(edges, key)
	if found {
		return j
	}
	return j - 1
}

// TestEstimateBucketMatchesBinarySearch: EstimateHistogram's bucket of a
// sum, for float32 and float64 keys, thresholds from subnormal (edges that
// repeat) to near the largest finite value (edges that reach infinity),
// and magnitudes on, between and beyond the edges.
func TestEstimateBucketMatchesBinarySearch(t *testing.T) {
	testEstimateBucket[float32](t)
	testEstimateBucket[float64](t)
}

func testEstimateBucket[T Float](t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	shift := uint(52 - 5)
	if magnitudeKey[T](math.Inf(1)) == uint64(math.Float32bits(float32(math.Inf(1)))) {
		shift = 23 - 5 // float32
	}
	for _, last := range []float64{1e-44, 1e-40, 3e-39, 1e-20, 0.01, 1, 15.84375, 1e30, 3e38, 1e300} {
		var edges [estimateBuckets + 1]uint64
		for j := range edges {
			edges[j] = magnitudeKey[T](last * math.Exp2(float64(j-estimateBuckets/2)/estimateOctave))
		}
		keys := []uint64{0, 1, math.MaxUint32, magnitudeKey[T](math.Inf(1)), magnitudeKey[T](math.NaN())}
		for _, e := range edges {
			keys = append(keys, e, e-1, e+1)
		}
		for range 20000 {
			keys = append(keys, magnitudeKey[T](last*math.Exp2(rng.NormFloat64()*3)))
		}
		for _, key := range keys {
			if got, want := estimateBucket(&edges, key, shift), estimateBucketRef(edges[:], key); got != want {
				t.Fatalf("%T last %g key %#x: bucket %d, want %d", T(0), last, key, got, want)
			}
		}
	}
}

// BenchmarkEstimateBucket: the bucket of 160K float32 sums spread around
// the last threshold (an owner's share at P = 8, n = 16M, 1%), by
// estimateBucket ("direct") and by binary search ("search").
//
//	go test -run '^$' -bench EstimateBucket ./collectives/
func BenchmarkEstimateBucket(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	const last = 40.0
	var edges [estimateBuckets + 1]uint64
	for j := range edges {
		edges[j] = magnitudeKey[float32](last * math.Exp2(float64(j-estimateBuckets/2)/estimateOctave))
	}
	keys := make([]uint64, 160_000)
	for i := range keys {
		keys[i] = magnitudeKey[float32](last * math.Exp2(rng.NormFloat64()))
	}
	var counts [estimateBuckets + 1]int
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			for _, k := range keys {
				if j := estimateBucket(&edges, k, 23-5); j >= 0 {
					counts[j]++
				}
			}
		}
	})
	b.Run("search", func(b *testing.B) {
		for b.Loop() {
			for _, k := range keys {
				if j := estimateBucketRef(edges[:], k); j >= 0 {
					counts[j]++
				}
			}
		}
	})
}

// TestTieGroupSplits: tieQuota splits the owners into groups of ceil(sqrt
// P) when bytes dominate the model, and keeps one allreduce when rounds do.
func TestTieGroupSplits(t *testing.T) {
	for _, p := range []int{5, 8, 13} {
		want := int(math.Ceil(math.Sqrt(float64(p))))
		if g := tieGroup(CostModel{Beta: 1e-9}, p, 4); g != want {
			t.Errorf("P=%d, bandwidth alone: group %d, want %d", p, g, want)
		}
		if g := tieGroup(CostModel{Alpha: 1e-5}, p, 4); g != p {
			t.Errorf("P=%d, latency alone: group %d, want %d", p, g, p)
		}
	}
}

// TestMagnitudeKeyOf: the owners' passes take a sum's key from its bits
// (magnitudeKeyOf); it must be the key magnitudeKey gives through
// float64, on every kind of value: zeros, subnormals, infinities, NaNs
// of both kinds and any payload, both signs.
func TestMagnitudeKeyOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	bits32 := []uint32{0, 1, 0x7f7fffff, 0x7f800000, 0x7f800001, 0x7fc00000, 0x7fbfffff, 0x7fffffff, 0x00800000}
	for range 10000 {
		bits32 = append(bits32, rng.Uint32())
	}
	for _, b := range bits32 {
		for _, sign := range []uint32{0, 1 << 31} {
			x := math.Float32frombits(b | sign)
			if got, want := magnitudeKeyOf(x), magnitudeKey[float32](float64(x)); got != want {
				t.Fatalf("float32 %#x: key %#x, want %#x", b|sign, got, want)
			}
		}
	}
	bits64 := []uint64{0, 1, 0x7ff0000000000000, 0x7ff0000000000001, 0x7ff8000000000000, 0x7fffffffffffffff}
	for range 10000 {
		bits64 = append(bits64, rng.Uint64())
	}
	for _, b := range bits64 {
		for _, sign := range []uint64{0, 1 << 63} {
			x := math.Float64frombits(b | sign)
			if got, want := magnitudeKeyOf(x), magnitudeKey[float64](x); got != want {
				t.Fatalf("float64 %#x: key %#x, want %#x", b|sign, got, want)
			}
		}
	}
}
