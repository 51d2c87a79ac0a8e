package compress

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sparcml/sparcml/sparse"
	"github.com/stretchr/testify/require"
)

// TestStepThresholdOfUpdate: with plain error feedback Sampled draws its
// sample from residual + gradient, and Sampled and Reuse gather in the
// pass that adds them (fused_threshold.go); every step must send what
// the method selects on the updated residual, computed apart: a
// Sparsifier without error feedback, same seed, given residual +
// gradient.
func TestStepThresholdOfUpdate(t *testing.T) {
	for _, m := range []Method{Sampled, Reuse} {
		testStepThresholdOfUpdate[float32](t, m)
		testStepThresholdOfUpdate[float64](t, m)
	}
}

func testStepThresholdOfUpdate[T Float](t *testing.T, method Method) {
	const n = 40*gatherChunk + 777 // blocks and a partial one
	rng := rand.New(rand.NewPCG(7, uint64(method)))
	fallbacks := 0
	inputs := make([]map[string][]T, 3) // a step's gradients
	for step := range inputs {
		inputs[step] = testInputs[T](rng, n)
	}
	for _, layers := range [][]int{nil, {1000, 20 * gatherChunk, n - 1000 - 20*gatherChunk}} {
		for _, c := range []struct{ density, tol float64 }{{0.001, 0}, {0.01, 0}, {0.05, 0}, {1, 0}, {0.01, 0.01}} {
			// The tight tolerance makes thresholds miss: corrections and
			// fallbacks on the updated residual.
			density := c.density
			cfg := Config{Method: method, Density: density, LayerSizes: layers, Seed: 11, Tolerance: c.tol, Adjustments: 1}
			s, err := NewSparsifier[T](n, cfg)
			require.NoError(t, err)
			cfg.NoErrorFeedback = true
			ref, err := NewSparsifier[T](n, cfg)
			require.NoError(t, err)
			var out, want sparse.Vector[T]
			for step := range 3 {
				for _, name := range []string{"normal", "ties", "sparse", "zero"} {
					g := inputs[step][name]
					v := slices.Clone(s.Residual())
					for i := range v {
						v[i] += g[i]
					}
					info, err := s.Step(g, &out)
					require.NoError(t, err)
					winfo, err := ref.Step(v, &want)
					require.NoError(t, err)
					require.Equal(t, winfo, info, "%v %T layers %v density %v step %d %s", method, g, layers, density, step, name)
					require.Equal(t, nonNil(want.Indices), nonNil(out.Indices), "%v %T layers %v density %v step %d %s", method, g, layers, density, step, name)
					for j, i := range out.Indices {
						if math.Float64bits(float64(out.Values[j])) != math.Float64bits(float64(v[i])) {
							t.Fatalf("%T %s entry %d: sent %v, want %v", g, name, i, out.Values[j], v[i])
						}
					}
					fallbacks += info.Fallbacks
				}
			}
		}
	}
	t.Logf("%v %T: %d fallbacks to the exact selection", method, *new(T), fallbacks)
	require.Positive(t, fallbacks, "no threshold missed")
}

// TestStepTakingZeroesGradient: StepTaking sends and keeps what Step
// does, bit for bit, for every method, with and without momentum, and
// leaves the gradient at zero with error feedback (untouched without).
func TestStepTakingZeroesGradient(t *testing.T) {
	const n = 30_000
	for m := range Method(4) {
		for _, cfg := range []Config{
			{Method: m, Density: 0.01, Seed: 5},
			{Method: m, Density: 0.01, Seed: 5, Momentum: 0.9},
			{Method: m, Density: 0.01, Seed: 5, NoErrorFeedback: true},
		} {
			a, err := NewSparsifier[float32](n, cfg)
			require.NoError(t, err)
			b, err := NewSparsifier[float32](n, cfg)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(3, uint64(m)))
			var outA, outB sparse.Vector[float32]
			for step := range 4 {
				g := make([]float32, n)
				randomGradient(rng, g, 1)
				taken := slices.Clone(g)
				_, err := a.Step(g, &outA)
				require.NoError(t, err)
				_, err = b.StepTaking(taken, &outB)
				require.NoError(t, err)
				require.Equal(t, outA, outB, "%+v step %d", cfg, step)
				require.Equal(t, a.Residual(), b.Residual(), "%+v step %d", cfg, step)
				require.Equal(t, a.Velocity(), b.Velocity(), "%+v step %d", cfg, step)
				if cfg.NoErrorFeedback {
					require.Equal(t, g, taken, "%+v: without error feedback the gradient is left alone", cfg)
				} else {
					require.Equal(t, make([]float32, n), taken, "%+v step %d: the gradient is in the residual", cfg, step)
				}
			}
		}
	}
}

// TestDeferRemoval: a deferred step followed by Remove leaves the
// residual and the velocity bit for bit as Step followed by Restore of
// the dropped entries does (with momentum masking, Restore does not give
// the dropped entries their velocity back, so the plain sparsifier's
// velocity is mended by hand, as the global scope's contract says); a
// failed deferred step leaves the state as if nothing was selected.
func TestDeferRemoval(t *testing.T) {
	const n = 20_000
	for _, mom := range []float64{0, 0.9} {
		cfg := Config{Density: 0.02, Momentum: mom}
		plain, err := NewSparsifier[float32](n, cfg)
		require.NoError(t, err)
		deferred, err := NewSparsifier[float32](n, cfg)
		require.NoError(t, err)
		deferred.DeferRemoval()
		rng := rand.New(rand.NewPCG(9, 10))
		var sentA, sentB sparse.Vector[float32]
		for step := range 4 {
			g := make([]float32, n)
			randomGradient(rng, g, 1)
			var vel []float32
			if mom > 0 {
				vel = slices.Clone(plain.Velocity())
				accumulateVelocityRef(vel, g, mom)
			}
			_, err := plain.Step(g, &sentA)
			require.NoError(t, err)
			_, err = deferred.Step(g, &sentB)
			require.NoError(t, err)
			require.Equal(t, sentA, sentB)
			// Every third entry is dropped.
			dropped := sparse.Vector[float32]{Dim: n}
			for j, i := range sentA.Indices {
				if j%3 == 0 {
					dropped.Indices = append(dropped.Indices, i)
					dropped.Values = append(dropped.Values, sentA.Values[j])
				} else if vel != nil {
					vel[i] = 0
				}
			}
			require.NoError(t, plain.Restore(&dropped))
			if vel != nil {
				copy(plain.Velocity(), vel)
			}
			require.NoError(t, deferred.Remove(&sentB, &dropped))
			require.Equal(t, plain.Residual(), deferred.Residual(), "momentum %v step %d", mom, step)
			require.Equal(t, plain.Velocity(), deferred.Velocity(), "momentum %v step %d", mom, step)
		}
		before := slices.Clone(deferred.Residual())
		g := make([]float32, n)
		randomGradient(rng, g, 1)
		_, err = deferred.Step(g, &sentB)
		require.NoError(t, err)
		require.NoError(t, deferred.Restore(&sentB), "a failed deferred step has nothing to restore")
		if mom == 0 {
			for i := range before {
				before[i] += g[i]
			}
			require.Equal(t, before, deferred.Residual(), "a failed deferred step keeps every entry")
		}
	}
}

// accumulateVelocityRef is momentum correction's u = m*u + g.
func accumulateVelocityRef(u, g []float32, m float64) {
	for i := range u {
		u[i] = float32(float32(m)*u[i]) + g[i]
	}
}
