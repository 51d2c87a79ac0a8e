package sparcml

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/compress"
)

// BenchmarkCompressorScopes times the Compressor's whole step (error
// feedback, local selection, reduction, result written back) on 8
// in-memory ranks sharing the machine's cores, n = 16M float32 at 1%, for
// each scope and local selection, after warmupSteps, every rank's
// gradient drawn afresh each step (outside the timer). It is the CPU side
// of `sparcml bench --op compress`: on the emulated cluster the wire adds
// to it. cpu-ms/op is the process's CPU time a step (every rank's), which
// on a shared machine says more than the wall-clock time. "local" is the
// part both scopes do, the Sparsifier's step and the result written into
// the gradient, without the reduction.
//
//	go test -run '^$' -bench CompressorScopes -benchtime 8x .
//	go test -run '^$' -bench 'CompressorScopes/exact/global' -benchtime 8x -cpuprofile /tmp/cpu .
func BenchmarkCompressorScopes(b *testing.B) {
	const p, n = 8, 16 << 20
	grads := make([][]float32, p)
	for r := range grads {
		grads[r] = make([]float32, n)
	}
	for _, method := range []compress.Method{compress.Exact, compress.Reuse, compress.Sampled} {
		for _, scope := range []string{"union", "global", "local"} {
			b.Run(fmt.Sprintf("%v/%v", method, scope), func(b *testing.B) {
				cfg := CompressorConfig{Sparsify: compress.Config{Density: 0.01, Method: method}}
				if scope == "global" {
					cfg.Scope = compress.ScopeGlobal
				}
				benchCompressor(b, grads, cfg, scope == "local")
			})
		}
	}
}

// warmupSteps are the untimed steps a benchmark starts with: from a zero
// residual, error feedback makes the threshold climb for the first few
// steps (a quarter from step 5 to 6), then settle.
const warmupSteps = 6

func benchCompressor(b *testing.B, grads [][]float32, cfg CompressorConfig, local bool) {
	p, n := len(grads), len(grads[0])
	comms, err := Local(p)
	if err != nil {
		b.Fatal(err)
	}
	defer closeAll(comms)
	zs := make([]*Compressor[float32], p)
	for r, c := range comms {
		if zs[r], err = NewCompressor[float32](c, n, cfg); err != nil {
			b.Fatal(err)
		}
	}
	onRanks := func(fn func(r int) error) {
		var wg sync.WaitGroup
		errs := make([]error, p)
		for r := range p {
			wg.Go(func() { errs[r] = fn(r) })
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	kept, cpu := 0, time.Duration(0)
	step := func(s int, timed bool) {
		onRanks(func(r int) error {
			benchGradient(grads[r], r, s)
			return nil
		})
		if timed {
			b.StartTimer()
			cpu0 := processCPUTime()
			defer func() { cpu += processCPUTime() - cpu0 }()
		}
		onRanks(func(r int) error {
			if local {
				z := zs[r]
				info, err := z.sp.StepTaking(grads[r], &z.send)
				z.writeResult(grads[r], &z.send)
				if r == 0 {
					kept += info.Selected
				}
				return err
			}
			st, err := zs[r].Reduce(context.Background(), grads[r])
			if r == 0 {
				kept += st.NNZOut
			}
			return err
		})
		if timed {
			b.StopTimer()
		}
	}
	for i := range warmupSteps {
		step(i, false)
	}
	kept = 0
	b.ResetTimer()
	b.StopTimer()
	for i := range b.N {
		step(warmupSteps+i, true)
	}
	b.ReportMetric(float64(kept)/float64(b.N), "kept")
	b.ReportMetric(cpu.Seconds()*1e3/float64(b.N), "cpu-ms/op")
}

// benchGradient fills g with rank r's gradient of a step: multiples of
// 1/64 in [-16, 16] from a counter-based hash, as `sparcml bench --op
// compress` draws them.
func benchGradient(g []float32, r, step int) {
	x := uint64(step+1)*0xD1B54A32D192ED03 ^ uint64(r+1)*0xBF58476D1CE4E5B9
	for i := range g {
		x += 0x9E3779B97F4A7C15
		z := (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		z ^= z >> 31
		g[i] = float32(int(z%2049)-1024) / 64
	}
}
