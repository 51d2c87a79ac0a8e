package sparcml

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/sparse"
	"github.com/stretchr/testify/require"
)

// seededGradient is rank r's gradient at a step: normal values, or
// multiples of 1/8 in [-4, 4] (exact) whose sums are exact in any order.
func seededGradient(r, step, n int, exact bool) []float32 {
	rng := rand.New(rand.NewPCG(uint64(r+1), uint64(step+100)))
	g := make([]float32, n)
	for i := range g {
		if exact {
			g[i] = float32(rng.IntN(65)-32) / 8
		} else {
			g[i] = float32(rng.NormFloat64())
		}
	}
	return g
}

// compressedRun runs steps reductions of every rank's seeded gradient
// through a Compressor on a local job of p ranks and returns every step's
// result on every rank and rank 0's statistics.
func compressedRun(t *testing.T, p, n, steps int, cfg CompressorConfig, exact bool) ([][][]float32, []CompressStats) {
	t.Helper()
	comms, err := Local(p)
	require.NoError(t, err)
	defer closeAll(comms)
	results := make([][][]float32, steps)
	for s := range results {
		results[s] = make([][]float32, p)
	}
	stats := make([]CompressStats, steps)
	errs := onEveryRank(t, comms, 60*time.Second, func(ctx context.Context, c *Comm) error {
		z, err := NewCompressor[float32](c, n, cfg)
		if err != nil {
			return err
		}
		for s := range steps {
			g := seededGradient(c.Rank(), s, n, exact)
			st, err := z.Reduce(ctx, g)
			if err != nil {
				return err
			}
			results[s][c.Rank()] = g
			if c.Rank() == 0 {
				stats[s] = st
			}
		}
		return nil
	})
	require.NoError(t, errors.Join(errs...))
	return results, stats
}

// reference is what every rank's selection gives, computed locally: per
// step, the average of the selected entries in float64, the average of
// their magnitudes (for rounding tolerances), and the largest magnitude
// each rank sent.
type reference struct {
	avg, mag [][]float64
	maxSent  [][]float64
}

// localAverage is the reference: every rank's selection made locally by
// its own Sparsifier from its seeded gradient, summed in float64 and
// divided by p.
func localAverage(t *testing.T, p, n, steps int, cfg compress.Config, exact bool) reference {
	sps := make([]*compress.Sparsifier[float32], p)
	for r := range sps {
		var err error
		sps[r], err = compress.NewSparsifier[float32](n, cfg)
		require.NoError(t, err)
	}
	var ref reference
	var sel sparse.Vector[float32]
	for s := range steps {
		sum, abs, maxSent := make([]float64, n), make([]float64, n), make([]float64, p)
		for r, sp := range sps {
			_, err := sp.Step(seededGradient(r, s, n, exact), &sel)
			require.NoError(t, err)
			for j, i := range sel.Indices {
				v := float64(sel.Values[j])
				sum[i] += v
				abs[i] += math.Abs(v)
				maxSent[r] = max(maxSent[r], math.Abs(v))
			}
		}
		for i := range sum {
			sum[i] /= float64(p)
			abs[i] /= float64(p)
		}
		ref.avg, ref.mag, ref.maxSent = append(ref.avg, sum), append(ref.mag, abs), append(ref.maxSent, maxSent)
	}
	return ref
}

// requireSameOnEveryRank: the ranks' model replicas stay in step only if
// every rank gets the same bits.
func requireSameOnEveryRank(t *testing.T, results [][][]float32) {
	t.Helper()
	for s, step := range results {
		for r := range step {
			for i := range step[r] {
				if math.Float32bits(step[r][i]) != math.Float32bits(step[0][i]) {
					t.Fatalf("step %d: rank %d entry %d is %v, rank 0 has %v", s, r, i, step[r][i], step[0][i])
				}
			}
		}
	}
}

// TestCompressorDenseEquivalence: at density 1 without quantization
// every nonzero entry is sent, and the result is the dense average
// allreduce's, bit for bit (exact values, so the order of the sums does
// not matter).
func TestCompressorDenseEquivalence(t *testing.T) {
	const n, steps = 3000, 2
	for _, p := range []int{1, 3, 4} {
		cfg := CompressorConfig{Sparsify: compress.Config{Density: 1}}
		got, stats := compressedRun(t, p, n, steps, cfg, true)
		comms, err := Local(p)
		require.NoError(t, err)
		want := make([][]float32, steps)
		errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
			for s := range steps {
				g := seededGradient(c.Rank(), s, n, true)
				if err := Allreduce(ctx, c, g, Sum); err != nil {
					return err
				}
				for i := range g {
					g[i] /= float32(p)
				}
				if c.Rank() == 0 {
					want[s] = g
				}
			}
			return nil
		})
		closeAll(comms)
		require.NoError(t, errors.Join(errs...))
		for s := range steps {
			for r := range p {
				require.Equal(t, want[s], got[s][r], "p=%d step %d rank %d", p, s, r)
			}
			require.Equal(t, 1.0, stats[s].Density)
			t.Logf("p=%d step %d: %d selected, algorithm %v", p, s, stats[s].Selected, stats[s].Algo)
		}
	}
}

// TestCompressorSparse: below density 1, for every selection method,
// whole buffer or per layer, the result is the average of every rank's
// selected entries computed locally.
func TestCompressorSparse(t *testing.T) {
	const n, steps = 20_000, 3
	layers := []int{5000, 1, 0, 14_999}
	for _, p := range []int{1, 3, 4} {
		for m := range compress.Method(4) {
			for _, perLayer := range []bool{false, true} {
				sc := compress.Config{Density: 0.02, Method: m, Seed: 77}
				if perLayer {
					sc.LayerSizes = layers
				}
				name := fmt.Sprintf("p=%d %v per-layer=%v", p, m, perLayer)
				got, stats := compressedRun(t, p, n, steps, CompressorConfig{Sparsify: sc}, false)
				ref := localAverage(t, p, n, steps, sc, false)
				requireSameOnEveryRank(t, got)
				for s := range steps {
					for i, w := range ref.avg[s] {
						// A few float32 roundings of partial sums.
						if d := math.Abs(float64(got[s][0][i]) - w); d > 4*float64(p)*ref.mag[s][i]*0x1p-24 {
							t.Fatalf("%s step %d entry %d: %v, want %v", name, s, i, got[s][0][i], w)
						}
					}
					require.Positive(t, stats[s].Selected, name)
					require.Equal(t, int64(stats[s].Selected)*8, stats[s].SelectedBytes)
				}
			}
		}
	}
}

// TestCompressorQuantized: with a lossy value encoding every entry of the
// result is within the encoding's documented bound of the exact average,
// whichever algorithm ran: each rank's values are encoded once and each
// reduced range at most once more (docs/ALGORITHMS-sparse.md), so an entry
// of the sum moves by at most the step h_j of every rank's encoding plus
// that of the sum, where a step is at most the largest magnitude
// encoded over the s levels (for fp16 and bf16: the relative rounding u
// of each value and of the sum). The stochastic encodings are unbiased:
// the mean error over the entries is checked against its standard
// deviation too.
func TestCompressorQuantized(t *testing.T) {
	const n, steps = 100_000, 1
	for _, p := range []int{1, 3, 4} {
		for _, qd := range quantCases() {
			q := qd.q
			if qd.density > 0.02 && p != 4 {
				continue // the split algorithm's case needs one P
			}
			sc := compress.Config{Density: qd.density}
			got, stats := compressedRun(t, p, n, steps, CompressorConfig{Sparsify: sc, Quant: q}, false)
			ref := localAverage(t, p, n, steps, sc, false)
			requireSameOnEveryRank(t, got)
			for s := range steps {
				var sumMax, sumSq float64 // over the ranks' largest values
				for _, m := range ref.maxSent[s] {
					sumMax += m
				}
				var bound float64 // on the sum, before the division by p
				switch q {
				case QuantFP16, QuantBF16:
					u := map[Quant]float64{QuantFP16: 0x1p-11, QuantBF16: 0x1p-8}[q]
					bound = u*sumMax + u*(1+u)*sumMax
				default:
					levels := map[Quant]float64{QuantQ8: 127, QuantQ4: 7, QuantQ2: 1}[q]
					for _, m := range ref.maxSent[s] {
						sumSq += (m / levels) * (m / levels)
					}
					hSum := (sumMax + sumMax/levels) / levels
					bound = sumMax/levels + hSum
					sumSq += hSum * hSum
				}
				if p == 1 {
					bound, sumSq = 0, 0 // nothing is sent, nothing quantized
				}
				bound = bound/float64(p) + 1e-6*sumMax
				worst, errSum, count := 0.0, 0.0, 0
				for i, w := range ref.avg[s] {
					d := float64(got[s][0][i]) - w
					worst = max(worst, math.Abs(d))
					if math.Abs(d) > bound {
						t.Fatalf("p=%d %v step %d entry %d: %v, exact %v, bound %v", p, q, s, i, got[s][0][i], w, bound)
					}
					if ref.mag[s][i] != 0 {
						errSum += d
						count++
					}
				}
				if q.Stochastic() && p > 1 {
					// Var of one entry's error <= sum h^2/4, over p^2 after
					// the division.
					sd := math.Sqrt(sumSq / 4 / float64(p*p) / float64(count))
					require.Less(t, math.Abs(errSum/float64(count)), 5*sd, "p=%d %v: biased", p, q)
				}
				wantBytes := int64(stats[s].Selected)*4 + int64(sparse.QuantValueBytes(q, 1024, uint64(stats[s].Selected)))
				require.Equal(t, wantBytes, stats[s].SelectedBytes)
				t.Logf("p=%d %v density %v step %d: worst error %.3g of bound %.3g, %v", p, q, sc.Density, s, worst, bound, stats[s].Algo)
			}
		}
	}
}

// quantCases are every lossy encoding at a low density (where the cost
// model picks the allgather of the selections, for 100k entries) and
// three at a higher one (the split algorithm, which quantizes the
// reduced ranges again).
func quantCases() []struct {
	q       Quant
	density float64
} {
	var cases []struct {
		q       Quant
		density float64
	}
	for _, q := range []Quant{QuantFP16, QuantBF16, QuantQ8, QuantQ4, QuantQ2} {
		cases = append(cases, struct {
			q       Quant
			density float64
		}{q, 0.02})
	}
	for _, q := range []Quant{QuantBF16, QuantQ4, QuantQ2} {
		cases = append(cases, struct {
			q       Quant
			density float64
		}{q, 0.05})
	}
	return cases
}

// TestCompressorInFlight: one Compressor per layer, started in reverse
// (as the backward pass produces the layers) with a dense allreduce in
// flight among them, waited for in another order; every layer's result
// is the local reference's.
func TestCompressorInFlight(t *testing.T) {
	const p, steps = 3, 3
	sizes := []int{4000, 300, 7000}
	comms, err := Local(p)
	require.NoError(t, err)
	defer closeAll(comms)
	cfgs := make([]CompressorConfig, len(sizes))
	for l := range sizes {
		cfgs[l] = CompressorConfig{Sparsify: compress.Config{Density: 0.05, Method: compress.Method(l % 3), Momentum: 0.9}}
	}
	results := make([][][][]float32, len(sizes)) // layer, step, rank
	for l := range results {
		results[l] = make([][][]float32, steps)
		for s := range results[l] {
			results[l][s] = make([][]float32, p)
		}
	}
	errs := onEveryRank(t, comms, 60*time.Second, func(ctx context.Context, c *Comm) error {
		zs := make([]*Compressor[float32], len(sizes))
		for l := range zs {
			var err error
			if zs[l], err = NewCompressor[float32](c, sizes[l], cfgs[l]); err != nil {
				return err
			}
		}
		for s := range steps {
			reqs := make([]*CompressRequest, len(sizes))
			grads := make([][]float32, len(sizes))
			var dense *Request
			for l := len(sizes) - 1; l >= 0; l-- {
				grads[l] = seededGradient(c.Rank(), 10*l+s, sizes[l], false)
				reqs[l] = zs[l].Start(ctx, grads[l])
				if l == 1 {
					dense = StartAllreduce(ctx, c, []float64{1, 2}, Sum)
				}
			}
			for _, l := range []int{1, 2, 0} {
				if _, err := reqs[l].Wait(ctx); err != nil {
					return err
				}
				results[l][s][c.Rank()] = grads[l]
			}
			if err := dense.Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, errors.Join(errs...))
	for l, size := range sizes {
		requireSameOnEveryRank(t, results[l])
		// The reference of layer l: gradients seeded by 10*l+step.
		sps := make([]*compress.Sparsifier[float32], p)
		for r := range sps {
			sps[r], _ = compress.NewSparsifier[float32](size, cfgs[l].Sparsify)
		}
		var sel sparse.Vector[float32]
		for s := range steps {
			sum := make([]float64, size)
			for r, sp := range sps {
				_, err := sp.Step(seededGradient(r, 10*l+s, size, false), &sel)
				require.NoError(t, err)
				for j, i := range sel.Indices {
					sum[i] += float64(sel.Values[j])
				}
			}
			for i := range sum {
				require.InDelta(t, sum[i]/p, float64(results[l][s][0][i]), 1e-5*(1+math.Abs(sum[i])), "layer %d step %d entry %d", l, s, i)
			}
		}
	}
}

// TestCompressorSparseOutput: ReduceSparse hands back the same average as
// Reduce, in sparse form.
func TestCompressorSparseOutput(t *testing.T) {
	const p, n = 4, 10_000
	cfg := CompressorConfig{Sparsify: compress.Config{Density: 0.01}}
	dense, _ := compressedRun(t, p, n, 1, cfg, false)
	comms, err := Local(p)
	require.NoError(t, err)
	defer closeAll(comms)
	outs := make([]*SparseVector[float32], p)
	errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
		z, err := NewCompressor[float32](c, n, cfg)
		if err != nil {
			return err
		}
		out := &SparseVector[float32]{}
		g := seededGradient(c.Rank(), 0, n, false)
		if _, err := z.ReduceSparse(ctx, g, out); err != nil {
			return err
		}
		if !slices.Equal(g, seededGradient(c.Rank(), 0, n, false)) {
			return errors.New("ReduceSparse changed the gradient")
		}
		outs[c.Rank()] = out
		return nil
	})
	require.NoError(t, errors.Join(errs...))
	for r, out := range outs {
		require.False(t, out.Dense)
		require.NoError(t, out.Validate())
		require.Equal(t, dense[0][r], out.ToDense(nil), "rank %d", r)
	}
}

// TestCompressorClip: with ClipNorm every rank scales its gradient by the
// factor of the ranks' mean squared norm, computed here locally.
func TestCompressorClip(t *testing.T) {
	const p, n, clip = 3, 5000, 10.0
	cfg := CompressorConfig{Sparsify: compress.Config{Density: 1}, ClipNorm: clip}
	got, stats := compressedRun(t, p, n, 1, cfg, false)
	var mean float64
	grads := make([][]float32, p)
	for r := range p {
		grads[r] = seededGradient(r, 0, n, false)
		for _, v := range grads[r] {
			mean += float64(v) * float64(v) / p
		}
	}
	f := clip / (math.Sqrt(mean) + 1e-6)
	require.Less(t, f, 1.0, "the test gradient must need clipping")
	require.InDelta(t, f, stats[0].ClipFactor, 1e-12)
	for i := range n {
		var want float64
		for r := range p {
			want += float64(grads[r][i]) * f / p
		}
		require.InDelta(t, want, float64(got[0][0][i]), 1e-5, "entry %d", i)
	}
}

// TestCompressorMisuse: a gradient of the wrong length, or a nil output,
// fails on that rank with ErrInvalid and on the others with its reason,
// at once (not a hang, not a result without that rank), with and without
// clipping's extra allreduce; a bad configuration is refused.
func TestCompressorMisuse(t *testing.T) {
	const p = 3
	comms, err := Local(p)
	require.NoError(t, err)
	defer closeAll(comms)
	_, err = NewCompressor[float32](comms[0], 10, CompressorConfig{Sparsify: compress.Config{Density: 2}})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewCompressor[float32](comms[0], 10, CompressorConfig{Quant: Quant(99)})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewCompressor[float32](comms[0], 10, CompressorConfig{ClipNorm: math.NaN()})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewCompressor[float32](comms[0], 10, CompressorConfig{Scope: compress.Scope(7)})
	require.ErrorIs(t, err, ErrInvalid)
	for _, start := range []float64{-1, math.NaN()} {
		_, err = NewCompressor[float32](comms[0], 10, CompressorConfig{Scope: compress.ScopeGlobal, GlobalWarmupEpochs: start})
		require.ErrorIs(t, err, ErrInvalid, "global warm-up %v epochs", start)
	}
	for _, clip := range []float64{0, 1} {
		for _, misuse := range []string{"99 entries", "nil output", "99 entries global"} {
			scope := compress.ScopeUnion
			if strings.HasSuffix(misuse, "global") {
				scope, misuse = compress.ScopeGlobal, strings.TrimSuffix(misuse, " global")
			}
			errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
				z, err := NewCompressor[float32](c, 100, CompressorConfig{ClipNorm: clip, Scope: scope})
				if err != nil {
					return err
				}
				g := make([]float32, 100)
				if c.Rank() != 1 {
					_, err = z.Reduce(ctx, g)
				} else if misuse == "nil output" {
					_, err = z.ReduceSparse(ctx, g, nil)
				} else {
					_, err = z.Reduce(ctx, g[:99])
				}
				return err
			})
			require.ErrorIs(t, errs[1], ErrInvalid)
			t.Logf("clip %v %v: rank 1: %v; rank 0: %v", clip, scope, errs[1], errs[0])
			for r := range p {
				require.ErrorContains(t, errs[r], misuse, "rank %d", r)
			}
			// The communicator is still usable.
			errs = onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
				return c.Barrier(ctx)
			})
			require.NoError(t, errors.Join(errs...))
		}
	}
}

// TestCompressorFailureKeepsResidual: a reduction that fails (here its
// context is already cancelled) leaves the selected entries in the
// residual (put back, or never taken out with the global scope), so
// nothing is lost, and the gradient buffer at zero.
func TestCompressorFailureKeepsResidual(t *testing.T) {
	const p, n = 2, 1000
	comms, err := Local(p)
	require.NoError(t, err)
	defer closeAll(comms)
	for _, scope := range []compress.Scope{compress.ScopeUnion, compress.ScopeGlobal} {
		errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
			z, err := NewCompressor[float32](c, n, CompressorConfig{Sparsify: compress.Config{Density: 0.1}, Scope: scope})
			if err != nil {
				return err
			}
			g := seededGradient(c.Rank(), 0, n, false)
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			// A rank fails by its own cancellation or by its peer's.
			buf := slices.Clone(g)
			if _, err := z.Reduce(cancelled, buf); err == nil {
				return errors.New("a cancelled reduction succeeded")
			}
			if !slices.Equal(g, z.sp.Residual()) {
				return fmt.Errorf("%v: the residual lost the entries of the failed step", scope)
			}
			if !slices.Equal(make([]float32, n), buf) {
				return fmt.Errorf("%v: the gradient, now in the residual, is still in its buffer", scope)
			}
			return nil
		})
		require.NoError(t, errors.Join(errs...))
	}
}

// TestCompressorEdgeValues: all-zero gradients send nothing and give
// zeros; a NaN on one rank reaches every rank, as a dense allreduce's
// would; float64 works like float32.
func TestCompressorEdgeValues(t *testing.T) {
	const p, n = 3, 1000
	comms, err := Local(p)
	require.NoError(t, err)
	defer closeAll(comms)
	results := make([][]float64, p)
	errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
		z, err := NewCompressor[float64](c, n, CompressorConfig{Sparsify: compress.Config{Density: 0.01, Method: compress.Sampled}})
		if err != nil {
			return err
		}
		g := make([]float64, n)
		st, err := z.Reduce(ctx, g)
		if err != nil {
			return err
		}
		if st.Selected != 0 || slices.ContainsFunc(g, func(v float64) bool { return v != 0 }) {
			return fmt.Errorf("zero gradient: %d selected", st.Selected)
		}
		g[7] = float64(c.Rank() + 1)
		if c.Rank() == 2 {
			g[5] = math.NaN()
		}
		if _, err := z.Reduce(ctx, g); err != nil {
			return err
		}
		results[c.Rank()] = g
		return nil
	})
	require.NoError(t, errors.Join(errs...))
	for r, g := range results {
		require.True(t, math.IsNaN(g[5]), "rank %d", r)
		require.Equal(t, 2.0, g[7], "rank %d: (1+2+3)/3", r)
		for i, v := range g {
			if i != 5 && i != 7 && v != 0 {
				t.Fatalf("rank %d: entry %d is %v, nothing was sent there", r, i, v)
			}
		}
	}
}

// The residuals the examples leave on rank 0. ExampleCompressor: what
// rank 0 did not send, its entries other than the two largest.
// ExampleCompressor_globalScope: rank 0 sent -8 at index 1 and 4 at
// index 7, and the global selection dropped index 7's sum, so the 4 goes
// back into the residual beside the entries it did not send.
func TestCompressorExampleResiduals(t *testing.T) {
	for _, tc := range []struct {
		example string
		scope   compress.Scope
		want    []float32
	}{
		{"ExampleCompressor", compress.ScopeUnion, []float32{1, 0, 2, 0, 3, 0, 0, 0}},
		{"ExampleCompressor_globalScope", compress.ScopeGlobal, []float32{1, 0, 2, 0, 3, 0, 0, 4}},
	} {
		t.Run(tc.example, func(t *testing.T) {
			comms := localJob(t, 2)
			errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
				cfg := CompressorConfig{Sparsify: compress.Config{Density: 0.25}, Scope: tc.scope}
				z, err := NewCompressor[float32](c, 8, cfg)
				if err != nil {
					return err
				}
				grad := []float32{1, -8, 2, 0, 3, 0, 0, 4}
				if c.Rank() == 1 {
					grad = []float32{0, 2, 0, 6, 1, 0, 0, -5}
				}
				if _, err := z.Reduce(ctx, grad); err != nil {
					return err
				}
				if c.Rank() == 0 && !slices.Equal(z.sp.Residual(), tc.want) {
					return fmt.Errorf("residual %v, want %v", z.sp.Residual(), tc.want)
				}
				return nil
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
		})
	}
}
