package collectives

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The vector sum (reduce_amd64.s) must give the scalar loop's bits. Both
// paths get the same inputs, at every length up to a few kernel widths and
// at offsets that leave the slices unaligned, with signed zeros,
// infinities and NaN among the values. Without the kernels (other
// architectures, purego) the test compares the scalar loop with itself.
func TestSumVecMatchesScalar(t *testing.T) {
	checkSumVec[float32](t, func(u uint64) float32 { return math.Float32frombits(uint32(u)) })
	checkSumVec[float64](t, math.Float64frombits)
}

func checkSumVec[T Float](t *testing.T, fromBits func(uint64) T) {
	rng := rand.New(rand.NewPCG(7, 11))
	special := []T{0, T(math.Copysign(0, -1)), T(math.Inf(1)), T(math.Inf(-1)), T(math.NaN()), 1, -1}
	value := func() T {
		switch rng.IntN(4) {
		case 0:
			return special[rng.IntN(len(special))]
		case 1:
			return fromBits(rng.Uint64()) // any bit pattern
		default:
			return T(rng.NormFloat64())
		}
	}
	for n := range 3*32 + 5 {
		for off := range 3 {
			dst, src := make([]T, n+off), make([]T, n+off)
			for i := range dst {
				dst[i], src[i] = value(), value()
			}
			want := append([]T(nil), dst...)
			scalarSum(want[off:], src[off:])
			sumInto(dst[off:], src[off:])
			for i := range dst {
				if math.Float64bits(float64(dst[i])) != math.Float64bits(float64(want[i])) {
					t.Fatalf("%T n=%d off=%d: element %d is %v, the scalar loop gives %v", dst[i], n, off, i, dst[i], want[i])
				}
			}
		}
	}
}

// scalarSum is sumInto without the vector kernels.
func scalarSum[T Float](dst, src []T) {
	saved := useSumAVX2
	useSumAVX2 = false
	defer func() { useSumAVX2 = saved }()
	sumInto(dst, src)
}
