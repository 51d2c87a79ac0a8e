package compress

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/sparse"
)

// The benchmarks run on a gradient of benchN float32 entries drawn from a
// normal distribution and select benchDensity of them. b.SetBytes is the
// input's size, so MB/s is input bytes per second of wall time; cpu-MB/s
// is the same per second of the benchmark thread's CPU time, which other
// processes on a shared machine distort far less.
const (
	benchN       = 16 << 20
	benchDensity = 0.01
)

func benchGradient(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// cpuMeter measures the benchmark loop's thread CPU time: start it just
// before the loop, report after it.
type cpuMeter struct {
	b     *testing.B
	start time.Duration
}

func startCPU(b *testing.B) *cpuMeter {
	runtime.LockOSThread()
	return &cpuMeter{b: b, start: threadCPU()}
}

func (m *cpuMeter) report(bytes int64) {
	used := threadCPU() - m.start
	runtime.UnlockOSThread()
	if used > 0 {
		m.b.ReportMetric(float64(bytes)*float64(m.b.N)/used.Seconds()/1e6, "cpu-MB/s")
	}
}

// benchSelect times one selection method at benchDensity.
func benchSelect(b *testing.B, method Method, check func(*testing.B, Result)) {
	x := benchGradient(benchN, 1)
	s, err := NewSelector[float32](Config{Method: method, ReuseSteps: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	k := SelectCount(benchN, benchDensity)
	dst := make([]uint32, 0, 3*k)
	var st State
	dst, _ = s.Select(dst[:0], x, k, &st) // Reuse: the exact step
	b.SetBytes(benchN * 4)
	b.ReportAllocs()
	m := startCPU(b)
	for b.Loop() {
		var r Result
		dst, r = s.Select(dst[:0], x, k, &st)
		check(b, r)
	}
	m.report(benchN * 4)
}

// BenchmarkTopK: exact top 1% of 16M float32.
func BenchmarkTopK(b *testing.B) {
	benchSelect(b, Exact, func(b *testing.B, r Result) {})
}

// BenchmarkTopK64: the same over float64 (8M entries: the same 64 MiB,
// the magnitude resolved in four digits instead of two).
func BenchmarkTopK64(b *testing.B) {
	x32 := benchGradient(benchN/2, 1)
	x := make([]float64, len(x32))
	for i, v := range x32 {
		x[i] = float64(v) * (1 + 1e-9*float64(i%1000)) // use the low bits too
	}
	s, _ := NewSelector[float64](Config{})
	k := SelectCount(len(x), benchDensity)
	dst := make([]uint32, 0, k)
	b.SetBytes(int64(len(x)) * 8)
	b.ReportAllocs()
	m := startCPU(b)
	for b.Loop() {
		dst, _ = s.TopK(dst[:0], x, k)
	}
	m.report(int64(len(x)) * 8)
}

// BenchmarkSampled: Deep Gradient Compression's sampled threshold at 1%
// of 16M float32 (sample, order statistic, one selecting pass).
func BenchmarkSampled(b *testing.B) {
	benchSelect(b, Sampled, func(b *testing.B, r Result) {
		if r.Fallback {
			b.Fatal("the sampled threshold fell back to the exact selection")
		}
	})
}

// BenchmarkReuse: a step of Ok-Topk's reused threshold (one selecting
// pass).
func BenchmarkReuse(b *testing.B) {
	benchSelect(b, Reuse, func(b *testing.B, r Result) {
		if r.Exact {
			b.Fatal("the reused threshold was recomputed")
		}
	})
}

// BenchmarkRandomK: 1% of 16M at random.
func BenchmarkRandomK(b *testing.B) {
	benchSelect(b, Random, func(b *testing.B, r Result) {})
}

// BenchmarkAccumulate is the error-feedback update v += g over 16M
// float32, to compare with BenchmarkDenseAdd (the collectives' reduction
// kernel, the same memory traffic) and BenchmarkDenseAddLoop (a plain
// loop): run them together, alternated, and compare medians.
func BenchmarkAccumulate(b *testing.B) {
	g := benchGradient(benchN, 3)
	v := make([]float32, benchN)
	b.SetBytes(benchN * 4)
	m := startCPU(b)
	for b.Loop() {
		accumulate(v, g)
	}
	m.report(benchN * 4)
}

// BenchmarkAccumulateMomentum is momentum correction's update (u = m*u +
// g; v += u), three streams instead of two.
func BenchmarkAccumulateMomentum(b *testing.B) {
	g := benchGradient(benchN, 3)
	u := make([]float32, benchN)
	v := make([]float32, benchN)
	b.SetBytes(benchN * 4)
	m := startCPU(b)
	for b.Loop() {
		accumulateMomentum(v, u, g, 0.9)
	}
	m.report(benchN * 4)
}

func BenchmarkDenseAdd(b *testing.B) {
	x := benchGradient(benchN, 3)
	y := make([]float32, benchN)
	b.SetBytes(benchN * 4)
	m := startCPU(b)
	for b.Loop() {
		collectives.ReduceInto(collectives.Sum, y, x)
	}
	m.report(benchN * 4)
}

func BenchmarkDenseAddLoop(b *testing.B) {
	x := benchGradient(benchN, 3)
	y := make([]float32, benchN)
	b.SetBytes(benchN * 4)
	m := startCPU(b)
	for b.Loop() {
		for i := range y {
			y[i] += x[i]
		}
	}
	m.report(benchN * 4)
}

// BenchmarkStepApart is BenchmarkStep's peer: the same step with the
// update, the exact selection (TopK: two passes) and the taking of the
// values done one after the other, as the Sparsifier does with momentum
// correction.
func BenchmarkStepApart(b *testing.B) {
	benchStep(b, true)
}

// BenchmarkStep is a whole Sparsifier step (error feedback, exact top 1%,
// taking the values out of the residual) over 16M float32, a fresh
// gradient each step (drawn outside the timer and the CPU meter), after
// the steps in which error feedback makes the threshold climb from a zero
// residual. "one-pass/op" is the share of steps whose selection took one
// pass over the residual (fused.go).
func BenchmarkStep(b *testing.B) {
	benchStep(b, false)
}

func benchStep(b *testing.B, apart bool) {
	g := make([]float32, benchN)
	s, err := NewSparsifier[float32](benchN, Config{Density: benchDensity})
	if err != nil {
		b.Fatal(err)
	}
	var out sparse.Vector[float32]
	const warmup = 8
	for step := range warmup {
		stepGradient(g, step)
		_, _ = s.Step(g, &out)
	}
	onePass := s.sel.sc.onePass
	b.SetBytes(benchN * 4)
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		stepGradient(g, warmup+i)
		b.StartTimer()
		c0 := threadCPU()
		if apart {
			accumulate(s.residual, g)
			out.Indices, _ = s.sel.TopK(out.Indices[:0], s.residual, SelectCount(benchN, benchDensity))
			out.Values = take(out.Values[:0], s.residual, out.Indices, s.residual, nil)
		} else {
			_, _ = s.Step(g, &out)
		}
		cpu += threadCPU() - c0
	}
	b.StopTimer()
	if cpu > 0 {
		b.ReportMetric(float64(benchN*4)*float64(b.N)/cpu.Seconds()/1e6, "cpu-MB/s")
	}
	if !apart {
		b.ReportMetric(float64(s.sel.sc.onePass-onePass)/float64(b.N), "one-pass/op")
	}
}

// stepGradient fills g with a step's gradient: multiples of 1/64 in
// [-16, 16] from a counter-based hash, as `sparcml bench --op compress`
// draws them (a normal draw of 16M entries would take longer than the
// step).
func stepGradient(g []float32, step int) {
	x := uint64(step+1) * 0xD1B54A32D192ED03
	for i := range g {
		x += 0x9E3779B97F4A7C15
		z := (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		z ^= z >> 31
		g[i] = float32(int(z%2049)-1024) / 64
	}
}
