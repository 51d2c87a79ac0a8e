package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/collectives/coltest"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// TestAverage: the division step gives the correctly rounded quotient for
// every n, powers of two (a multiplication) included, on values spanning
// float32's range and its subnormals.
func TestAverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	xs := make([]float32, 1003)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(280)-150)))
	}
	xs[0], xs[1], xs[2] = 0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 64, 100, 1 << 20} {
		got := append([]float32(nil), xs...)
		collectives.Average(got, n)
		for i, x := range xs {
			want := x / float32(n)
			require.Equal(t, math.Float32bits(want), math.Float32bits(got[i]), "n=%d x=%g", n, x)
		}
	}
	d := []float64{1, 2, 3}
	collectives.Average(d, 0) // no contributions: left alone
	require.Equal(t, []float64{1, 2, 3}, d)
}

func TestParseReduceOp(t *testing.T) {
	for _, red := range []collectives.ReduceOp{collectives.Sum, collectives.Min, collectives.Max, collectives.Avg} {
		got, err := collectives.ParseReduceOp(red.String())
		require.NoError(t, err)
		require.Equal(t, red, got)
	}
	_, err := collectives.ParseReduceOp("prod")
	require.ErrorContains(t, err, "prod")
}

// TestAllreduceAvgLarge runs Avg over vectors of several segments per
// block, in float64, on a power of two and on a folded P.
func TestAllreduceAvgLarge(t *testing.T) {
	for _, algo := range allreduceAlgos[1:] {
		checkAllreduce[float64](t, 4, 30_001, algo, collectives.Avg, 4<<10)
		checkAllreduce[float64](t, 6, 20_011, algo, collectives.Avg, 4<<10)
	}
}

// TestQuantizedAllreduceAvg: under every codec, Avg returns bit for bit
// the decoded sum divided by P (same inputs, same codec seeds), on every
// rank, and that is within the sum's error bound divided by P of the
// exact average.
func TestQuantizedAllreduceAvg(t *testing.T) {
	for _, p := range []int{1, 2, 3, 5, 8} {
		for _, kind := range quantKinds {
			for _, n := range []int{0, 1, 10_007} {
				q := quantRun{p: p, n: n, kind: kind, seed: uint64(p*31 + n), codecSeed: uint64(p + n)}
				sum := runQuantized[float32](t, q)
				q.red = collectives.Avg
				avg := runQuantized[float32](t, q)
				requireNoErrors(t, sum.errs)
				requireNoErrors(t, avg.errs)
				requireIdentical(t, avg.outputs)
				want := sum.outputs[0]
				collectives.Average(want, p)
				require.Equal(t, want, avg.outputs[0], "P%d %v n=%d", p, kind, n)
				if n == 0 || p == 1 {
					continue
				}
				ref := newQuantRef(avg.inputs)
				bound := func(i int) float64 { return halfBound(kind, p, ref.abs[i], ref.sum[i]) }
				if kind.Stochastic() {
					hard, _, _ := stochasticBounds(kind, ref)
					bound = func(int) float64 { return hard }
				}
				for i, got := range avg.outputs[0] {
					exact := ref.sum[i] / float64(p)
					tol := bound(i)/float64(p) + math.Abs(exact)*eps32
					require.LessOrEqual(t, math.Abs(float64(got)-exact), tol, "P%d %v element %d", p, kind, i)
				}
			}
		}
	}
}

// TestQuantizedAllreduceRefusesMinMax: Min and Max of quantized values are
// refused on every rank.
func TestQuantizedAllreduceRefusesMinMax(t *testing.T) {
	for _, red := range []collectives.ReduceOp{collectives.Min, collectives.Max} {
		errs := coltest.Run(t, 3, quantTimeout, func(ctx context.Context, tr transport.Transport) error {
			op := coltest.NewOp(ctx, tr, 1, transport.Desc{})
			return collectives.QuantizedAllreduce(op, make([]float32, 10), red, codecFor(t, quant.FP16, 0, 0, tr.Rank()))
		})
		requireAllFailedWith(t, errs, transport.ErrInvalid, transport.ErrAborted)
	}
}

// TestSparseAllreduceAvg: every algorithm, forced or chosen, with equal
// and balanced ranges, returns the exact sum divided by P on every rank,
// bit-identical, for several P including non-powers of two.
func TestSparseAllreduceAvg(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := append([]spAlgoCase{
		// The dense end of the switch, forced.
		{"ring", collectives.SparseOptions{Algo: collectives.AlgoRing}},
		{"rabenseifner", collectives.SparseOptions{Algo: collectives.AlgoRabenseifner}},
		{"recursive-doubling", collectives.SparseOptions{Algo: collectives.AlgoRecursiveDoubling}},
	}, spAlgoCases...)
	for _, ac := range cases {
		t.Run(ac.name, func(t *testing.T) {
			for _, p := range []int{1, 2, 3, 4, 5, 7} {
				for _, kind := range []string{"zero", "1%", "50%", "100%", "disjoint", "skewed"} {
					dim := []int{1, 64, 1000}[rng.IntN(3)]
					in := spInputs[float64](rng, p, dim, kind)
					opts := ac.opts
					opts.Reduce = collectives.Avg
					outs, stats, _, errs := spRun(t, in, opts)
					name := fmt.Sprintf("P=%d dim=%d %s", p, dim, kind)
					for r, err := range errs {
						require.NoError(t, err, "%s: rank %d", name, r)
					}
					ref := spReference(in)
					for i := range ref {
						ref[i] /= float64(p)
					}
					for r, out := range outs {
						require.NoError(t, spCheckResult(out, ref, dim), "%s: rank %d", name, r)
						require.True(t, spSameBits(outs[0], out), "%s: rank %d differs from rank 0", name, r)
						require.NotEqual(t, collectives.AlgoAuto, stats[r].Algo, "%s: SparseStats.Algo must name what ran", name)
					}
				}
			}
		})
	}
}

// TestSparseAllreduceQuantAvg: with a lossy codec, Avg returns the
// quantized sum divided by P, bit for bit (same inputs and seeds).
func TestSparseAllreduceQuantAvg(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for _, algo := range spqAlgos {
		for _, kind := range []quant.Kind{quant.BF16, quant.Q4} {
			for _, p := range []int{2, 3, 5} {
				in := spqInputs[float32](rng, p, 5000, "1%")
				opts := collectives.SparseOptions{Algo: algo, Quant: kind}
				sums, _, _ := spqRun(t, in, opts, 11)
				opts.Reduce = collectives.Avg
				avgs, _, _ := spqRun(t, in, opts, 11)
				for r := range avgs {
					want := sums[r].ToDense(nil)
					collectives.Average(want, p)
					require.Equal(t, want, avgs[r].ToDense(nil), "%v %v P%d rank %d", algo, kind, p, r)
				}
			}
		}
	}
}

// TestSparseAllreduceRefusesMinMax: the sparse allreduce sums or
// averages; Min and Max fail on every rank with ErrInvalid.
func TestSparseAllreduceRefusesMinMax(t *testing.T) {
	in := spInputs[float32](rand.New(rand.NewPCG(1, 2)), 3, 100, "1%")
	errs := coltest.Run(t, 3, 10*time.Second, func(ctx context.Context, tr transport.Transport) error {
		opts := collectives.SparseOptions{Reduce: collectives.Max, Algo: collectives.AlgoSparseAllgather}
		_, err := collectives.SparseAllreduce(coltest.NewOp(ctx, tr, 1, transport.Desc{}), in[tr.Rank()], &sparse.Vector[float32]{}, opts)
		return err
	})
	requireAllFailedWith(t, errs, transport.ErrInvalid, transport.ErrAborted)
}

// TestAvgMismatch: a rank that passes Sum where the others pass Avg makes
// the operation fail with ErrMismatch on every rank instead of returning
// different results: dense with every algorithm, reduce-scatter, the
// quantized allreduce, and the sparse allreduce with a forced algorithm
// (which skips the options exchange) and under AlgoAuto.
func TestAvgMismatch(t *testing.T) {
	const p, odd = 4, 2
	red := func(rank int) collectives.ReduceOp {
		if rank == odd {
			return collectives.Sum
		}
		return collectives.Avg
	}
	check := func(name string, errs []error) {
		t.Helper()
		mismatched := 0
		for r, err := range errs {
			require.Error(t, err, "%s: rank %d", name, r)
			if errors.Is(err, transport.ErrMismatch) {
				mismatched++
			} else {
				require.ErrorIs(t, err, transport.ErrAborted, "%s: rank %d", name, r)
			}
		}
		require.NotZero(t, mismatched, "%s: nobody reported the mismatch", name)
	}
	for _, algo := range allreduceAlgos[1:] {
		check("allreduce "+algo.String(), runDense(t, p, func(op *collectives.Op) error {
			_, err := collectives.Allreduce(op, make([]float32, 1000), red(op.Rank()), algo, collectives.DefaultCostModel)
			return err
		}))
	}
	check("reduce-scatter", runDense(t, p, func(op *collectives.Op) error {
		return collectives.ReduceScatter(op, make([]float32, 400), make([]float32, 100), red(op.Rank()), collectives.AlgoRing)
	}))
	check("quantized", runDense(t, p, func(op *collectives.Op) error {
		return collectives.QuantizedAllreduce(op, make([]float32, 1000), red(op.Rank()), codecFor(t, quant.FP16, 0, 0, op.Rank()))
	}))
	in := spInputs[float32](rand.New(rand.NewPCG(9, 9)), p, 1000, "1%")
	for _, algo := range []collectives.Algo{collectives.AlgoSSARRecursiveDoubling, collectives.AlgoDSAR, collectives.AlgoAuto} {
		check("sparse "+algo.String(), runDense(t, p, func(op *collectives.Op) error {
			opts := collectives.SparseOptions{Reduce: red(op.Rank()), Algo: algo}
			_, err := collectives.SparseAllreduce(op, in[op.Rank()], &sparse.Vector[float32]{}, opts)
			return err
		}))
	}
}

// TestSparseStatsAlgoOneRank: with one rank nothing runs; the stats name
// the forced algorithm, or AlgoDirect under AlgoAuto, never AlgoAuto.
func TestSparseStatsAlgoOneRank(t *testing.T) {
	in := spInputs[float32](rand.New(rand.NewPCG(2, 2)), 1, 100, "1%")
	for _, tc := range []struct{ algo, want collectives.Algo }{
		{collectives.AlgoAuto, collectives.AlgoDirect},
		{collectives.AlgoDSAR, collectives.AlgoDSAR},
	} {
		outs, stats, _, errs := spRun(t, in, collectives.SparseOptions{Algo: tc.algo})
		requireNoErrors(t, errs)
		require.Equal(t, tc.want, stats[0].Algo)
		require.Equal(t, in[0].ToDense(nil), outs[0].ToDense(nil))
	}
}

// BenchmarkAverage measures Avg's last step on 1M float32 elements: a
// multiplication for a power-of-two rank count, a division otherwise.
// Compare with BenchmarkReduceInto, one combining step of the same size.
// Every iteration starts from the same values (copied outside the timer),
// so they never drift into the slow subnormal range.
func BenchmarkAverage(b *testing.B) {
	for _, n := range []int{4, 3} {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			src := make([]float32, 1<<20)
			for i := range src {
				src[i] = float32(i%1000) + 0.5
			}
			data := make([]float32, len(src))
			b.SetBytes(int64(len(data) * 4))
			for b.Loop() {
				b.StopTimer()
				copy(data, src)
				b.StartTimer()
				collectives.Average(data, n)
			}
		})
	}
}
