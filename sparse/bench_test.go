package sparse

import (
	"runtime"
	"time"

	"fmt"
	"math/rand/v2"
	"testing"
)

// The kernel benchmarks report ns per nonzero read ("ns/nnz") next to the
// usual ns/op, at 1% and 10% density of a 2^20 dimension.

func benchCases() []struct{ dim, nnz int } {
	return []struct{ dim, nnz int }{{1 << 20, 1 << 20 / 100}, {1 << 20, 1 << 20 / 10}}
}

func reportPerNNZ(b *testing.B, nnz int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nnz), "ns/nnz")
}

// cpuMeter measures the CPU time of the benchmark's own thread, which a
// shared, loaded machine distorts far less than wall time: start it
// before the loop, report after ("cpu-ns/nnz").
type cpuMeter struct {
	b     *testing.B
	start time.Duration
}

func startCPU(b *testing.B) *cpuMeter {
	runtime.LockOSThread()
	return &cpuMeter{b: b, start: threadCPU()}
}

func (m *cpuMeter) report(nnz int) {
	used := threadCPU() - m.start
	runtime.UnlockOSThread()
	m.b.ReportMetric(float64(used.Nanoseconds())/float64(m.b.N)/float64(nnz), "cpu-ns/nnz")
}

func BenchmarkMerge(b *testing.B) {
	for _, c := range benchCases() {
		b.Run(fmt.Sprintf("dim=%d/nnz=%d", c.dim, c.nnz), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			x := randomVector[float32](rng, c.dim, c.nnz)
			y := randomVector[float32](rng, c.dim, c.nnz)
			var dst Vector[float32]
			b.ReportAllocs()
			for b.Loop() {
				_ = Add(&dst, x, y)
			}
			reportPerNNZ(b, 2*c.nnz)
		})
	}
}

func BenchmarkSumAll8(b *testing.B) { benchSumAll(b, 8, 2) }

// BenchmarkSumKernels times the windowed sum against the merge that
// sumSparse would otherwise use (mergeParts), for k random parts of 2^24 positions
// holding one entry per "per" positions together: where one overtakes the
// other sets windowDensityShift.
func BenchmarkSumKernels(b *testing.B) {
	const dim = 1 << 24
	for _, k := range []int{2, 4, 8} {
		for _, per := range []int{8, 16, 32, 64, 128, 256, 512} {
			rng := rand.New(rand.NewPCG(1, uint64(k)))
			parts := make([]*Vector[float32], k)
			for i := range parts {
				parts[i] = randomVector[float32](rng, dim, dim/per/k)
			}
			total := k * (dim / per / k)
			var dst Vector[float32]
			b.Run(fmt.Sprintf("k=%d/per=%d/windows", k, per), func(b *testing.B) {
				for b.Loop() {
					sumWindows(&dst, parts, dim, total)
				}
				reportPerNNZ(b, total)
			})
			b.Run(fmt.Sprintf("k=%d/per=%d/merge", k, per), func(b *testing.B) {
				for b.Loop() {
					mergeParts(&dst, parts, dim, total)
				}
				reportPerNNZ(b, total)
			})
		}
	}
}

// benchSumAll times SumAll of k random parts sharing benchCases' nonzeros.
func benchSumAll(b *testing.B, k int, seed uint64) {
	for _, c := range benchCases() {
		b.Run(fmt.Sprintf("dim=%d/nnz=%d", c.dim, c.nnz), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(2, seed))
			parts := make([]*Vector[float32], k)
			for i := range parts {
				parts[i] = randomVector[float32](rng, c.dim, c.nnz/k)
			}
			var dst Vector[float32]
			b.ReportAllocs()
			m := startCPU(b)
			for b.Loop() {
				_ = SumAll(&dst, parts)
			}
			m.report(c.nnz)
			reportPerNNZ(b, c.nnz)
		})
	}
}

// BenchmarkSumAll8Dense: 8 parts of 1% each of 2^20 (8% together, the
// windowed kernel's range; the dense accumulator starts where the result
// may be dense).
func BenchmarkSumAll8Dense(b *testing.B) { benchSumAllAt(b, 8, 1<<20, 2, 3) }

// BenchmarkSumAll4Large is the allgather baseline's local sum at the
// issue's size: four parts of 1% each of 2^24 positions.
func BenchmarkSumAll4Large(b *testing.B) { benchSumAllAt(b, 4, 1<<24, 3, 4) }

// benchSumAllAt sums k random parts of 1% each of dim positions.
func benchSumAllAt(b *testing.B, k, dim int, seed1, seed2 uint64) {
	nnz := dim / 100
	rng := rand.New(rand.NewPCG(seed1, seed2))
	parts := make([]*Vector[float32], k)
	for i := range parts {
		parts[i] = randomVector[float32](rng, dim, nnz)
	}
	var dst Vector[float32]
	b.ReportAllocs()
	m := startCPU(b)
	for b.Loop() {
		_ = SumAll(&dst, parts)
	}
	m.report(k * nnz)
	reportPerNNZ(b, k*nnz)
}

func BenchmarkScatterAdd(b *testing.B) {
	for _, c := range benchCases() {
		b.Run(fmt.Sprintf("dim=%d/nnz=%d", c.dim, c.nnz), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 3))
			x := randomVector[float32](rng, c.dim, c.nnz)
			dense := make([]float32, c.dim)
			b.ReportAllocs()
			for b.Loop() {
				_ = x.AddTo(dense)
			}
			reportPerNNZ(b, c.nnz)
		})
	}
}

func BenchmarkDenseAdd(b *testing.B) {
	const dim = 1 << 20
	x := NewDense(make([]float32, dim))
	dense := make([]float32, dim)
	b.ReportAllocs()
	b.SetBytes(dim * 4)
	for b.Loop() {
		_ = x.AddTo(dense)
	}
	reportPerNNZ(b, dim)
}

func BenchmarkEncodeDecode(b *testing.B) {
	for _, c := range benchCases() {
		b.Run(fmt.Sprintf("dim=%d/nnz=%d", c.dim, c.nnz), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(4, 4))
			x := randomVector[float32](rng, c.dim, c.nnz)
			var buf []byte
			var got Vector[float32]
			b.ReportAllocs()
			for b.Loop() {
				buf = encoded(x, buf[:0])
				if err := got.Decode(buf); err != nil {
					b.Fatal(err)
				}
			}
			reportPerNNZ(b, c.nnz)
		})
	}
}
