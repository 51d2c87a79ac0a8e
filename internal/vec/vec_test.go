package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The kernels (vec_amd64.s) must give the scalar loops' results. Both
// paths get the same inputs at every length up to a few kernel widths and
// at offsets that leave the slices unaligned. Without the kernels (other
// architectures, purego) the tests compare the scalar loops with
// themselves.

func TestAddMatchesScalar(t *testing.T) {
	checkAdd(t, func(u uint64) float32 { return math.Float32frombits(uint32(u)) }, func(x float32) uint64 { return uint64(math.Float32bits(x)) })
	checkAdd(t, math.Float64frombits, math.Float64bits)
}

func checkAdd[T Float](t *testing.T, fromBits func(uint64) T, toBits func(T) uint64) {
	rng := rand.New(rand.NewPCG(7, 11))
	special := []T{0, T(math.Copysign(0, -1)), T(math.Inf(1)), T(math.Inf(-1)), T(math.NaN()), 1, -1}
	value := func() T {
		switch rng.IntN(4) {
		case 0:
			return special[rng.IntN(len(special))]
		case 1:
			return fromBits(rng.Uint64()) // any bit pattern, NaN payloads included
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
			want := slices.Clone(dst)
			withoutKernels(func() { Add(want[off:], src[off:]) })
			Add(dst[off:], src[off:])
			for i := range dst {
				if toBits(dst[i]) != toBits(want[i]) {
					t.Fatalf("%T n=%d off=%d: element %d is %v, the scalar loop gives %v", dst[i], n, off, i, dst[i], want[i])
				}
			}
		}
	}
}

func TestAppendAtLeast32MatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	thresholds := []uint32{1, 2, 1 << 20, 1<<31 - 1, 1 << 31, 1<<31 + 1, math.MaxUint32}
	for n := range 4*32 + 5 {
		for _, hit := range []float64{0, 0.02, 0.5, 1} {
			keys := make([]uint32, n+1)
			t0 := thresholds[rng.IntN(len(thresholds))]
			for i := range keys {
				k := rng.Uint32()
				if rng.Float64() < hit {
					k = k&(1<<31) | max(t0, 1<<30) // at or above the threshold when it can be
				} else if t0 > 1 {
					k = k&(1<<31) | rng.Uint32N(min(t0, 1<<31)) // below it, either sign
				}
				keys[i] = k
			}
			for _, tt := range append(thresholds, t0) {
				prefix := []uint32{99}
				got := AppendAtLeast32(slices.Clone(prefix), keys[1:], tt, 7)
				want := slices.Clone(prefix)
				for i, k := range keys[1:] {
					if k&(1<<31-1) >= tt {
						want = append(want, 7+uint32(i))
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("n=%d t=%#x: got %v, want %v", n, tt, got, want)
				}
			}
		}
	}
}

// withoutKernels runs f on the scalar loops.
func withoutKernels(f func()) {
	add, atLeast := useAdd, useAtLeast
	useAdd, useAtLeast = false, false
	defer func() { useAdd, useAtLeast = add, atLeast }()
	f()
}

// BenchmarkAdd compares the kernel with the scalar loop on 4096 elements
// (a gatherChunk block of error feedback's update, in the cache) and on
// 12M (a rank's share of a 16M allreduce at P = 4, from memory).
func BenchmarkAdd(b *testing.B) {
	for _, n := range []int{4096, 12 << 20} {
		dst, src := make([]float32, n), make([]float32, n)
		for i := range src {
			src[i] = float32(i)
		}
		b.Run(fmt.Sprintf("kernel/%d", n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				Add(dst, src)
			}
		})
		b.Run(fmt.Sprintf("scalar/%d", n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			withoutKernels(func() {
				for b.Loop() {
					Add(dst, src)
				}
			})
		})
	}
}

// BenchmarkAppendAtLeast32 scans a block of 4096 keys with 2% of them at
// or above the threshold, as the threshold selections do at 1%.
func BenchmarkAppendAtLeast32(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]uint32, 4096)
	for i := range keys {
		keys[i] = rng.Uint32N(1000)
		if rng.Float64() < 0.02 {
			keys[i] = 1000 + rng.Uint32N(1000)
		}
	}
	dst := make([]uint32, 0, len(keys))
	for _, kernel := range []bool{true, false} {
		b.Run(map[bool]string{true: "kernel", false: "scalar"}[kernel], func(b *testing.B) {
			b.SetBytes(int64(4 * len(keys)))
			run := func() {
				for b.Loop() {
					dst = AppendAtLeast32(dst[:0], keys, 1000, 0)
				}
			}
			if kernel {
				run()
			} else {
				withoutKernels(run)
			}
		})
	}
}
