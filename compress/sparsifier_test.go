package compress

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sparcml/sparcml/sparse"
	"github.com/stretchr/testify/require"
)

func randomGradient[T Float](rng *rand.Rand, x []T, scale float64) {
	for i := range x {
		x[i] = T(scale * rng.NormFloat64())
	}
}

// dense returns the sent vector as n dense values.
func dense[T Float](v *sparse.Vector[T]) []T {
	return v.ToDense(nil)
}

// TestErrorFeedbackMovesExactly: after a step, element by element, what
// was sent plus the new residual equals the old residual plus the
// gradient, bit for bit, for every method.
func TestErrorFeedbackMovesExactly(t *testing.T) {
	for m := range Method(4) {
		testErrorFeedbackMovesExactly[float32](t, m)
		testErrorFeedbackMovesExactly[float64](t, m)
	}
}

func testErrorFeedbackMovesExactly[T Float](t *testing.T, m Method) {
	const n = 50_000
	rng := rand.New(rand.NewPCG(1, uint64(m)))
	s, err := NewSparsifier[T](n, Config{Method: m, Density: 0.02, Seed: 3})
	require.NoError(t, err)
	g := make([]T, n)
	var out sparse.Vector[T]
	for step := range 10 {
		randomGradient(rng, g, 1)
		before := slices.Clone(s.Residual())
		info, err := s.Step(g, &out)
		require.NoError(t, err)
		require.NoError(t, out.Validate())
		require.Equal(t, n, out.Dim)
		require.Equal(t, info.Selected, out.NNZ())
		sent := dense(&out)
		after := s.Residual()
		for i := range g {
			want := before[i] + g[i]
			if sent[i]+after[i] != want || (sent[i] != 0 && after[i] != 0) {
				t.Fatalf("%v %T step %d entry %d: sent %v + residual %v, want %v", m, g, step, i, sent[i], after[i], want)
			}
		}
	}
}

// TestErrorFeedbackConserves: over many steps, everything sent plus the
// final residual equals the sum of the gradients (in float64, to the
// rounding of the float32 accumulations).
func TestErrorFeedbackConserves(t *testing.T) {
	const n, steps = 20_000, 60
	rng := rand.New(rand.NewPCG(2, 3))
	layers := []int{100, 0, 4900, 15_000}
	s, err := NewSparsifier[float32](n, Config{Method: Sampled, Density: 0.01, LayerSizes: layers})
	require.NoError(t, err)
	g := make([]float32, n)
	sumG := make([]float64, n)
	sumAbs := make([]float64, n)
	sumSent := make([]float64, n)
	var out sparse.Vector[float32]
	for range steps {
		randomGradient(rng, g, 1)
		for i, v := range g {
			sumG[i] += float64(v)
			sumAbs[i] += math.Abs(float64(v))
		}
		_, err := s.Step(g, &out)
		require.NoError(t, err)
		for j, i := range out.Indices {
			sumSent[i] += float64(out.Values[j])
		}
	}
	for i := range sumG {
		got := sumSent[i] + float64(s.Residual()[i])
		// Each accumulation rounds once to float32 (half an ulp of a
		// partial sum at most sumAbs).
		if d := math.Abs(got - sumG[i]); d > steps*sumAbs[i]*0x1p-24 {
			t.Fatalf("entry %d: sent + residual %v, gradients %v", i, got, sumG[i])
		}
	}
}

// TestMomentumCorrection compares a float32 sparsifier with momentum
// correction against DGC's equations in float64, step by step: u = m*u
// + g; v = v + u; send v at the selected indices; clear them in v and (with
// masking) in u. The selection is checked to be the float32 residual's
// top k (the selection itself has its own tests); the reference then
// follows the same indices.
func TestMomentumCorrection(t *testing.T) {
	for _, masking := range []bool{true, false} {
		const n, k, steps, mom = 5000, 50, 40, 0.9
		rng := rand.New(rand.NewPCG(4, 5))
		s, err := NewSparsifier[float32](n, Config{Density: float64(k) / n, Momentum: mom, NoMomentumMasking: !masking})
		require.NoError(t, err)
		u := make([]float64, n)
		v := make([]float64, n)
		g := make([]float32, n)
		var out sparse.Vector[float32]
		for step := range steps {
			randomGradient(rng, g, 1)
			for i := range u {
				u[i] = mom*u[i] + float64(g[i])
				v[i] += u[i]
			}
			// The top k of the residual before the step clears it.
			acc := make([]float32, n)
			for i := range acc {
				acc[i] = s.Residual()[i] + float32(mom)*s.Velocity()[i] + g[i]
			}
			_, err := s.Step(g, &out)
			require.NoError(t, err)
			require.Len(t, out.Indices, k)
			for j, i := range out.Indices {
				require.InDelta(t, v[i], float64(out.Values[j]), 1e-4*(1+math.Abs(v[i])), "masking %v step %d entry %d", masking, step, i)
				v[i] = 0
				if masking {
					u[i] = 0
				}
			}
			require.Equal(t, refTopK(acc, k), out.Indices, "step %d", step)
			for i := range v {
				if !near(v[i], s.Residual()[i]) || !near(u[i], s.Velocity()[i]) {
					t.Fatalf("masking %v step %d entry %d: v %v u %v, float64 reference v %v u %v",
						masking, step, i, s.Residual()[i], s.Velocity()[i], v[i], u[i])
				}
			}
		}
	}
}

// near: float32 state within the rounding a few dozen float32 steps
// accumulate, relative to the float64 reference.
func near(want float64, got float32) bool {
	return math.Abs(want-float64(got)) <= 1e-4*(1+math.Abs(want))
}

func TestNoErrorFeedback(t *testing.T) {
	g := []float32{0.5, -3, 0, 2, 1, -0.25}
	s, err := NewSparsifier[float32](len(g), Config{Density: 0.5, NoErrorFeedback: true})
	require.NoError(t, err)
	var out sparse.Vector[float32]
	info, err := s.Step(g, &out)
	require.NoError(t, err)
	require.Equal(t, []uint32{1, 3, 4}, out.Indices)
	require.Equal(t, []float32{-3, 2, 1}, out.Values)
	require.Equal(t, 3, info.K)
	require.Nil(t, s.Residual())
	// Nothing carried over: the same gradient selects the same again.
	_, _ = s.Step(g, &out)
	require.Equal(t, []uint32{1, 3, 4}, out.Indices)
	require.Equal(t, []float32{0.5, -3, 0, 2, 1, -0.25}, g, "grad untouched")
}

// TestPerLayer: with layer sizes, every layer sends its own top
// ceil(density*size), with indices into the whole buffer.
func TestPerLayer(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 7))
	layers := []int{3, 0, 1, 250, 1000, 7}
	n := 0
	for _, l := range layers {
		n += l
	}
	g := make([]float64, n)
	randomGradient(rng, g, 1)
	// A layer of huge values must not crowd out the others.
	for i := 4; i < 254; i++ {
		g[i] *= 1000
	}
	s, err := NewSparsifier[float64](n, Config{Density: 0.1, LayerSizes: layers})
	require.NoError(t, err)
	var out sparse.Vector[float64]
	info, err := s.Step(g, &out)
	require.NoError(t, err)
	var want []uint32
	off := 0
	for _, l := range layers {
		for _, i := range refTopK(g[off:off+l], SelectCount(l, 0.1)) {
			want = append(want, uint32(off)+i)
		}
		off += l
	}
	require.Equal(t, want, out.Indices)
	require.Equal(t, 1+0+1+25+100+1, info.K)
	whole, err := NewSparsifier[float64](n, Config{Density: 0.1})
	require.NoError(t, err)
	_, err = whole.Step(g, &out)
	require.NoError(t, err)
	require.Equal(t, refTopK(g, SelectCount(n, 0.1)), out.Indices)
}

func TestRestore(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	g := make([]float32, 1000)
	randomGradient(rng, g, 1)
	s, _ := NewSparsifier[float32](len(g), Config{Density: 0.05})
	var out sparse.Vector[float32]
	_, err := s.Step(g, &out)
	require.NoError(t, err)
	require.NoError(t, s.Restore(&out))
	require.Equal(t, g, s.Residual(), "a failed step leaves the residual as if nothing was sent")
}

func TestStepAllocatesNothing(t *testing.T) {
	for m := range Method(4) {
		rng := rand.New(rand.NewPCG(10, 11))
		g := make([]float32, 200_000)
		randomGradient(rng, g, 1)
		s, _ := NewSparsifier[float32](len(g), Config{Method: m, Momentum: 0.9, LayerSizes: []int{150_000, 50_000}})
		var out sparse.Vector[float32]
		for range 3 {
			_, _ = s.Step(g, &out)
		}
		allocs := testing.AllocsPerRun(5, func() { _, _ = s.Step(g, &out) })
		require.Zero(t, allocs, "%v", m)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Density: 1.5}, {Density: -0.1}, {Density: math.NaN()},
		{Momentum: 1}, {Momentum: 0.9, NoErrorFeedback: true},
		{Tolerance: 1}, {ReuseSteps: -1}, {Method: 9}, {WarmupEpochs: -1},
		{LayerSizes: []int{5, 4}}, {LayerSizes: []int{11, -1}},
	} {
		_, err := NewSparsifier[float32](10, c)
		require.True(t, errors.Is(err, ErrInvalid), "%+v: %v", c, err)
	}
	s, err := NewSparsifier[float32](10, Config{})
	require.NoError(t, err)
	_, err = s.Step(make([]float32, 9), &sparse.Vector[float32]{})
	require.ErrorIs(t, err, ErrInvalid)
	m, err := ParseMethod("Sampled")
	require.NoError(t, err)
	require.Equal(t, Sampled, m)
	_, err = ParseMethod("topk")
	require.ErrorIs(t, err, ErrInvalid)
}

func TestWarmupDensity(t *testing.T) {
	const target, w = 0.001, 4
	var prev float64
	for e := 0; e <= w+2; e++ {
		d := WarmupDensity(target, float64(e), w)
		switch {
		case e == 0:
			require.Equal(t, WarmupStartDensity, d)
		case e >= w:
			require.Equal(t, target, d)
		default:
			// Exponential: a constant ratio between epochs, from 25% to
			// the target in w of them.
			require.InDelta(t, math.Pow(target/WarmupStartDensity, 1.0/w), d/prev, 1e-12)
		}
		prev = d
	}
	// Deep Gradient Compression's own schedule, to its rounding.
	for e, want := range []float64{0.25, 0.0625, 0.015625, 0.004, 0.001} {
		require.InEpsilon(t, want, WarmupDensity(target, float64(e), w), 0.03)
	}
	require.Equal(t, 0.5, WarmupDensity(0.5, 0, 4), "a target above 25% needs no warm-up")
	require.Equal(t, 0.01, WarmupDensity(0.01, 1, 0), "no warm-up")

	s, _ := NewSparsifier[float32](1000, Config{Density: 0.01, WarmupEpochs: 2})
	g := make([]float32, 1000)
	randomGradient(rand.New(rand.NewPCG(1, 1)), g, 1)
	var out sparse.Vector[float32]
	info, _ := s.Step(g, &out)
	require.Equal(t, 250, info.K)
	s.SetEpoch(2)
	info, _ = s.Step(g, &out)
	require.Equal(t, 10, info.K)
}

func TestSelectCount(t *testing.T) {
	require.Equal(t, 7, SelectCount(100, 0.07))
	require.Equal(t, 1, SelectCount(3, 0.01))
	require.Equal(t, 0, SelectCount(0, 0.5))
	require.Equal(t, 10, SelectCount(10, 1))
	require.Equal(t, 163, SelectCount(16_234, 0.01))
}

func TestClip(t *testing.T) {
	x := []float32{3, -4, 0}
	require.Equal(t, 25.0, SquaredNorm(x))
	require.Equal(t, 1.0, ClipFactor(25, 10), "within the norm")
	f := ClipFactor(25, 1)
	require.InDelta(t, 0.2, f, 1e-7)
	Scale(x, f)
	require.InDelta(t, 1, math.Sqrt(SquaredNorm(x)), 1e-6)
	require.Equal(t, 1.0, ClipFactor(math.Inf(1), 1))
	require.Equal(t, 1.0, ClipFactor(math.NaN(), 1))
}

// TestStepSelectsTopKOfUpdate: with plain error feedback the exact
// selection reads the residual in the same pass that adds the gradient
// (accumulateSelect); every step must still send exactly refTopK of
// residual + gradient, layer by layer, on every shape of input.
func TestStepSelectsTopKOfUpdate(t *testing.T) {
	testStepSelectsTopKOfUpdate[float32](t)
	testStepSelectsTopKOfUpdate[float64](t)
}

func testStepSelectsTopKOfUpdate[T Float](t *testing.T) {
	onePass := 0
	const n = 3*gatherChunk + 777 // blocks and a partial one
	rng := rand.New(rand.NewPCG(5, 6))
	for _, layers := range [][]int{nil, {1000, gatherChunk + 1, n - 1000 - gatherChunk - 1}} {
		for _, density := range []float64{0.001, 0.02, 0.5, 1} {
			s, err := NewSparsifier[T](n, Config{Density: density, LayerSizes: layers})
			require.NoError(t, err)
			sizes := layers
			if sizes == nil {
				sizes = []int{n}
			}
			var out sparse.Vector[T]
			for step := range 3 {
				for name, g := range testInputs[T](rng, n) {
					if name == "special" {
						// Sums of infinities are NaNs of other payloads, which the
						// selection ranks by their bits and refTopK alike
						// (TestTopKAgainstSort covers special values).
						continue
					}
					v := slices.Clone(s.Residual())
					for i := range v {
						v[i] += g[i]
					}
					var want []uint32
					off := 0
					for _, size := range sizes {
						for _, i := range refTopK(v[off:off+size], SelectCount(size, density)) {
							want = append(want, i+uint32(off))
						}
						off += size
					}
					before := s.sel.sc.onePass
					info, err := s.Step(g, &out)
					require.NoError(t, err)
					require.True(t, info.Exact)
					onePass += s.sel.sc.onePass - before
					if !slices.Equal(nonNil(want), nonNil(out.Indices)) {
						t.Fatalf("%T layers %v density %v step %d %s: sent %d entries, want the %d of the reference", g, layers, density, step, name, len(out.Indices), len(want))
					}
					for j, i := range out.Indices {
						if math.Float64bits(float64(out.Values[j])) != math.Float64bits(float64(v[i])) {
							t.Fatalf("%T %s entry %d: sent %v, want %v", g, name, i, out.Values[j], v[i])
						}
					}
				}
			}
		}
	}
	t.Logf("%T: %d one-pass selections", *new(T), onePass)
	require.Positive(t, onePass, "no step took the one-pass selection")
}
