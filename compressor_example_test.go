package sparcml_test

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/compress"
)

// onRanks runs fn on every rank of a local job of size ranks and waits.
func onRanks(size int, fn func(c *sparcml.Comm)) {
	comms, _ := sparcml.Local(size)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func(c *sparcml.Comm) {
			defer wg.Done()
			defer c.Close()
			fn(c)
		}(c)
	}
	wg.Wait()
}

// Each of two ranks sends the 2 largest of its 8 gradient entries (density
// 0.25); the result is their average, and what was not sent stays in the
// residual for the next step (TestCompressorExampleResiduals checks it).
func ExampleCompressor() {
	onRanks(2, func(c *sparcml.Comm) {
		ctx := context.Background()
		z, err := sparcml.NewCompressor[float32](c, 8, sparcml.CompressorConfig{
			Sparsify: compress.Config{Density: 0.25},
		})
		if err != nil {
			panic(err)
		}
		grad := []float32{1, -8, 2, 0, 3, 0, 0, 4}
		if c.Rank() == 1 {
			grad = []float32{0, 2, 0, 6, 1, 0, 0, -5}
		}
		stats, err := z.Reduce(ctx, grad)
		if err != nil {
			panic(err)
		}
		if c.Rank() == 0 {
			fmt.Println("average:", grad)
			fmt.Println("sent:", stats.Selected, "of", z.Len())
		}
	})
	// Output:
	// average: [0 -4 0 3 0 0 0 -0.5]
	// sent: 2 of 8
}

// The same two gradients with the global scope: the ranks' selections sum
// to -8 at index 1, 6 at 3 and -1 at 7 (4 - 5), and only the k = 2 largest
// of those sums are kept. Index 7 is dropped, so each rank's entry there
// goes back into its residual (TestCompressorExampleResiduals checks
// it).
func ExampleCompressor_globalScope() {
	onRanks(2, func(c *sparcml.Comm) {
		ctx := context.Background()
		z, err := sparcml.NewCompressor[float32](c, 8, sparcml.CompressorConfig{
			Sparsify: compress.Config{Density: 0.25},
			Scope:    compress.ScopeGlobal,
		})
		if err != nil {
			panic(err)
		}
		grad := []float32{1, -8, 2, 0, 3, 0, 0, 4}
		if c.Rank() == 1 {
			grad = []float32{0, 2, 0, 6, 1, 0, 0, -5}
		}
		stats, err := z.Reduce(ctx, grad)
		if err != nil {
			panic(err)
		}
		if c.Rank() == 0 {
			fmt.Println("average:", grad)
			fmt.Println("kept:", stats.NNZOut, "exact:", stats.Global.Exact)
		}
	})
	// Output:
	// average: [0 -4 0 3 0 0 0 0]
	// kept: 2 exact: true
}

// The optimizer's contract under momentum correction: the Compressor
// applies the momentum (DGC's u = m*u + g; v += u) before selecting, so the
// training loop applies the result with plain SGD. Here four ranks fit w to
// a target with a quadratic loss, sending 10% of the gradient per step.
func ExampleCompressor_momentumCorrection() {
	const n, lr = 100, 0.05
	target := make([]float32, n)
	for i := range target {
		target[i] = float32(math.Sin(float64(i)))
	}
	onRanks(4, func(c *sparcml.Comm) {
		ctx := context.Background()
		z, err := sparcml.NewCompressor[float32](c, n, sparcml.CompressorConfig{
			Sparsify: compress.Config{Density: 0.1, Momentum: 0.9},
		})
		if err != nil {
			panic(err)
		}
		w := make([]float32, n) // the same start on every rank
		grad := make([]float32, n)
		for range 300 {
			for i := range grad {
				grad[i] = w[i] - target[i] // gradient of (w - target)^2 / 2
			}
			if _, err := z.Reduce(ctx, grad); err != nil {
				panic(err)
			}
			for i := range w {
				w[i] -= lr * grad[i] // plain SGD: no momentum here
			}
		}
		if c.Rank() == 0 {
			var worst float64
			for i := range w {
				worst = max(worst, math.Abs(float64(w[i]-target[i])))
			}
			fmt.Println("converged:", worst < 1e-3)
		}
	})
	// Output: converged: true
}

// Per-layer compressors started as the backward pass produces each layer
// (last layer first), so that one layer's reduction overlaps the
// computation of the next, as DDP's buckets do. Every rank starts them in
// the same order.
func ExampleCompressor_Start() {
	sizes := []int{1000, 10, 500} // layers 0, 1, 2
	onRanks(3, func(c *sparcml.Comm) {
		ctx := context.Background()
		zs := make([]*sparcml.Compressor[float32], len(sizes))
		for l, n := range sizes {
			var err error
			zs[l], err = sparcml.NewCompressor[float32](c, n, sparcml.CompressorConfig{
				Sparsify: compress.Config{Density: 0.1},
				Quant:    sparcml.QuantBF16,
			})
			if err != nil {
				panic(err)
			}
		}
		grads := make([][]float32, len(sizes))
		reqs := make([]*sparcml.CompressRequest, len(sizes))
		for l := len(sizes) - 1; l >= 0; l-- {
			grads[l] = make([]float32, sizes[l])
			for i := range grads[l] {
				grads[l][i] = float32(i % 7) // ... the backward pass of layer l ...
			}
			reqs[l] = zs[l].Start(ctx, grads[l])
		}
		sent := 0
		for l := range reqs {
			stats, err := reqs[l].Wait(ctx)
			if err != nil {
				panic(err)
			}
			sent += stats.Selected
		}
		if c.Rank() == 0 {
			fmt.Println("entries sent per rank:", sent)
		}
	})
	// Output: entries sent per rank: 151
}
