package quant

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// cpuThroughput measures, next to the wall-clock MB/s that SetBytes gives,
// the throughput per CPU second of the process ("cpu-MB/s"). The
// benchmarks are single-threaded and allocation-free, so CPU time is the
// time the loop ran: on a shared, oversubscribed machine this is the
// figure that does not depend on the neighbours. Call start after setup
// and stop after the loop.
type cpuThroughput struct {
	b     *testing.B
	bytes int64
	cpu   time.Duration
}

func startCPU(b *testing.B, bytes int64) *cpuThroughput {
	b.SetBytes(bytes)
	b.ReportAllocs()
	return &cpuThroughput{b: b, bytes: bytes, cpu: processCPUTime()}
}

func (t *cpuThroughput) stop() {
	used := processCPUTime() - t.cpu
	if used <= 0 {
		return
	}
	t.b.ReportMetric(float64(t.bytes)*float64(t.b.N)/1e6/used.Seconds(), "cpu-MB/s")
}

// benchValues is the vector size of the codec benchmarks: 4 MiB of
// float32, about one layer's gradient, larger than L2.
const benchValues = 1 << 20

func gradientLike(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 1e-3)
	}
	return x
}

// Every benchmark reports throughput in float32 input bytes (4 per value),
// so encode and decode figures compare directly with memcpy and with each
// other across kinds.
func BenchmarkEncode(b *testing.B) {
	x := gradientLike(benchValues, 1)
	for _, kind := range Kinds() {
		b.Run(kind.String(), func(b *testing.B) { benchEncode(b, kind, x) })
	}
}

// benchEncode is the body of BenchmarkEncode for one kind.
func benchEncode(b *testing.B, kind Kind, x []float32) {
	c, err := New(kind, Options{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, c.EncodedSize(len(x)))
	t := startCPU(b, int64(4*len(x)))
	for b.Loop() {
		if _, err := c.Encode(buf, x); err != nil {
			b.Fatal(err)
		}
	}
	t.stop()
}

func benchmarkDecode(b *testing.B, add bool) {
	x := gradientLike(benchValues, 1)
	for _, kind := range Kinds() {
		b.Run(kind.String(), func(b *testing.B) {
			c, err := New(kind, Options{Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			enc, err := c.Encode(make([]byte, c.EncodedSize(len(x))), x)
			if err != nil {
				b.Fatal(err)
			}
			out := make([]float32, len(x))
			decode := c.Decode
			if add {
				decode = c.DecodeAdd
			}
			t := startCPU(b, int64(4*len(x)))
			for b.Loop() {
				if err := decode(out, enc); err != nil {
					b.Fatal(err)
				}
			}
			t.stop()
		})
	}
}

func BenchmarkDecode(b *testing.B)    { benchmarkDecode(b, false) }
func BenchmarkDecodeAdd(b *testing.B) { benchmarkDecode(b, true) }

// sparseIndices returns n sorted distinct indices spread uniformly over
// [0, dim): the shape of a top-k gradient.
func sparseIndices(n, dim int, seed uint64) []uint32 {
	rng := rand.New(rand.NewPCG(seed, 2))
	picked := make(map[uint32]bool, n)
	for len(picked) < n {
		picked[uint32(rng.IntN(dim))] = true
	}
	return slices.Sorted(maps.Keys(picked))
}

// Index benchmarks report throughput in uint32 input bytes (4 per index).
func BenchmarkIndices(b *testing.B) {
	const n, dim = 1 << 16, 1 << 22 // 1.6% density, mean gap 64
	idx := sparseIndices(n, dim, 3)
	for _, m := range []IndexMethod{IndexVarint, IndexBitPack, IndexAuto} {
		enc, err := EncodeIndices(make([]byte, MaxIndicesSize(n, m)), idx, m)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("encode/%s", m), func(b *testing.B) {
			buf := make([]byte, MaxIndicesSize(n, m)) // room for the one-pass encoders
			t := startCPU(b, 4*n)
			for b.Loop() {
				if _, err := EncodeIndices(buf, idx, m); err != nil {
					b.Fatal(err)
				}
			}
			t.stop()
			b.ReportMetric(float64(len(enc))/n, "B/index")
		})
		b.Run(fmt.Sprintf("decode/%s", m), func(b *testing.B) {
			out := make([]uint32, n)
			t := startCPU(b, 4*n)
			for b.Loop() {
				if _, err := DecodeIndices(out, enc, dim); err != nil {
					b.Fatal(err)
				}
			}
			t.stop()
		})
	}
}

// BenchmarkEncodeQ4Paths is BenchmarkEncode/q4 on each implementation of
// the 4-bit quantizer this CPU has (see quantize4_test.go).
func BenchmarkEncodeQ4Paths(b *testing.B) {
	x := gradientLike(benchValues, 1)
	for _, p := range append([]q4path{q4scalar}, quantize4Paths()...) {
		b.Run(p.name, func(b *testing.B) {
			withQuantize4Path(p, func() { benchEncode(b, Q4, x) })
		})
	}
}
