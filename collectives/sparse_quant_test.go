package collectives_test

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

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/collectives/coltest"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

var spqKinds = []quant.Kind{quant.FP16, quant.BF16, quant.Q8, quant.Q4, quant.Q2}

// spqAlgos are the algorithms that support a lossy codec, and AlgoAuto.
var spqAlgos = []collectives.Algo{
	collectives.AlgoSSARSplitAllgather, collectives.AlgoDSAR,
	collectives.AlgoSparseAllgather, collectives.AlgoAuto,
}

// spqInputs returns p vectors of dimension dim, each holding round(d*dim)
// entries (at least one for "single", none for "zero") at random
// positions, with normal values scaled differently per rank.
func spqInputs[T collectives.Float](rng *rand.Rand, p, dim int, density string) []*sparse.Vector[T] {
	in := make([]*sparse.Vector[T], p)
	for r := range in {
		k := 0
		switch density {
		case "single":
			k = 1
		case "1%":
			k = dim / 100
		case "50%":
			k = dim / 2
		}
		idx := rng.Perm(dim)[:k]
		slices.Sort(idx)
		v := &sparse.Vector[T]{Dim: dim}
		scale := 1 + float64(r%3)
		for _, x := range idx {
			v.Indices = append(v.Indices, uint32(x))
			v.Values = append(v.Values, T(scale*rng.NormFloat64()))
		}
		in[r] = v
	}
	return in
}

// spqRun runs SparseAllreduce on every rank with opts, rank r seeding its
// codec with seed*64+r, and returns outputs, stats and bytes sent.
func spqRun[T collectives.Float](t testing.TB, in []*sparse.Vector[T], opts collectives.SparseOptions, seed uint64) ([]*sparse.Vector[T], []collectives.SparseStats, []int64) {
	t.Helper()
	p := len(in)
	outs := make([]*sparse.Vector[T], p)
	stats := make([]collectives.SparseStats, p)
	sent := make([]int64, p)
	errs := coltest.Run(t, p, 20*time.Second, func(ctx context.Context, tr transport.Transport) error {
		r := tr.Rank()
		o := opts
		o.QuantSeed = seed*64 + uint64(r)
		before := tr.Stats()
		outs[r] = &sparse.Vector[T]{}
		var err error
		stats[r], err = collectives.SparseAllreduce(coltest.NewOp(ctx, tr, 3, transport.Desc{}), in[r], outs[r], o)
		sent[r] = int64(tr.Stats().Sub(before).BytesSent)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return outs, stats, sent
}

// spqRef is the exact reference: every rank's input densified in float64
// (inputs are float32 or float64 values, exactly representable).
type spqRef struct {
	xs     [][]float64
	sum    []float64 // exact to within one float64 rounding per addition
	absSum []float64
	union  []bool
}

func newSpqRef[T collectives.Float](in []*sparse.Vector[T]) spqRef {
	dim := in[0].Dim
	ref := spqRef{sum: make([]float64, dim), absSum: make([]float64, dim), union: make([]bool, dim)}
	for _, v := range in {
		x := make([]float64, dim)
		for k, i := range v.Indices {
			x[i] = float64(v.Values[k])
			ref.union[i] = true
		}
		ref.xs = append(ref.xs, x)
		for i, xi := range x {
			ref.sum[i] += xi
			ref.absSum[i] += math.Abs(xi)
		}
	}
	return ref
}

// spqQuantErr bounds the error of quantizing a value x once:
//   - fp16/bf16: half an ulp of 11 or 8 significant bits, plus 2^-24 for a
//     float64 value first rounded to float32, plus fp16's absolute error
//     below its normal range (2^-25) or bf16's below float32's (2^-134);
//   - q8/q4/q2: one step M/s, M the largest magnitude the value shares a
//     bucket with (bounded by maxAbs), stretched by float32 roundings of
//     the scale and of the decoded product, plus the float32 rounding of
//     a float64 x.
func spqQuantErr(kind quant.Kind, x, maxAbs float64) float64 {
	switch kind {
	case quant.FP16:
		return (0x1p-11+0x1p-24)*math.Abs(x) + 0x1p-25
	case quant.BF16:
		return (0x1p-8+0x1p-24)*math.Abs(x) + 0x1p-134
	}
	s := float64(int(1)<<(kind.Bits()-1) - 1)
	return maxAbs*(1+0x1p-21)/s + 0x1p-23*math.Abs(x)
}

// spqGamma is the classical bound n*eps/(1-n*eps) on the relative error
// of a sum of n+1 terms formed by n roundings to precision eps.
func spqGamma(n int, eps float64) float64 { return float64(n) * eps / (1 - float64(n)*eps) }

// spqBounds returns, per element, the largest deviation from the exact
// sum the algorithm allows, derived from where it quantizes:
//   - split and DSAR: every contribution but the owner's quantized once
//     (in buckets within the owner's range), summed in T, and the sum
//     quantized once more by the owner (in a bucket within its range);
//   - allgather: every contribution quantized once (buckets within the
//     whole vector), summed in T, nothing after;
//   - a dense end of the switch, or one rank: exact up to the additions.
//
// The sum of P terms in T adds spqGamma(P-1, eps_T) of the magnitudes
// summed, and the float64 reference itself is off by as much again.
//
// For the stochastic kinds it also returns, per element, the sum of the
// squared widths of the quantizations' ranges (each decoded value lies
// between two adjacent levels, h apart, around its input) and the part of
// the hard bound that is rounding rather than quantization (the slack a
// mean may keep): the mean of T trials is then within
// sqrt(widthSq ln(2N/delta) / (2T)) + slack of the exact sum for all N
// elements with probability 1-delta (Azuma-Hoeffding: each quantization
// is unbiased given everything before it).
func spqBounds(ref spqRef, kind quant.Kind, algo collectives.Algo, bounds []int, eps float64) []float64 {
	hard, _, _ := spqErrModel(ref, kind, algo, bounds, eps)
	return hard
}

func spqErrModel(ref spqRef, kind quant.Kind, algo collectives.Algo, bounds []int, eps float64) (hard, widthSq, slack []float64) {
	p, dim := len(ref.xs), len(ref.sum)
	hard, widthSq, slack = make([]float64, dim), make([]float64, dim), make([]float64, dim)
	gamma := spqGamma(p-1, eps) + spqGamma(p-1, 0x1p-53)
	exact := p == 1 || !(algo == collectives.AlgoSSARSplitAllgather || algo == collectives.AlgoDSAR || algo == collectives.AlgoSparseAllgather)
	if exact {
		for i := range hard {
			hard[i] = gamma * ref.absSum[i]
			slack[i] = hard[i]
		}
		return hard, widthSq, slack
	}
	levels := float64(int(1)<<(kind.Bits()-1) - 1)
	step := func(maxAbs float64) float64 { return maxAbs * (1 + 0x1p-21) / levels }
	split := algo != collectives.AlgoSparseAllgather
	if !split {
		bounds = []int{0, dim}
	}
	for o := 0; o+1 < len(bounds); o++ {
		lo, hi := bounds[o], bounds[o+1]
		maxAbs := make([]float64, p) // of each rank's entries in the range
		for r, x := range ref.xs {
			for _, xi := range x[lo:hi] {
				maxAbs[r] = max(maxAbs[r], math.Abs(xi))
			}
		}
		// e1: the error of the sum before the owner's final quantization.
		e1 := make([]float64, hi-lo)
		maxA := 0.0
		for i := lo; i < hi; i++ {
			var contrib, mag float64
			for r, x := range ref.xs {
				// The owner's own slice is not quantized, and zero (an
				// entry not sent, or a zero in a dense message) decodes
				// to zero in every codec.
				if split && r == o || x[i] == 0 {
					mag += math.Abs(x[i])
					continue
				}
				e := spqQuantErr(kind, x[i], maxAbs[r])
				contrib += e
				mag += math.Abs(x[i]) + e
				if kind.Stochastic() {
					widthSq[i] += step(maxAbs[r]) * step(maxAbs[r])
					slack[i] += 0x1p-23 * math.Abs(x[i])
				}
			}
			e1[i-lo] = contrib + gamma*mag
			slack[i] += gamma * mag
			maxA = max(maxA, math.Abs(ref.sum[i])+e1[i-lo])
		}
		for i := lo; i < hi; i++ {
			hard[i] = e1[i-lo]
			if split {
				a := math.Abs(ref.sum[i]) + e1[i-lo]
				hard[i] += spqQuantErr(kind, a, maxA)
				if kind.Stochastic() && a > 0 {
					widthSq[i] += step(maxA) * step(maxA)
					slack[i] += 0x1p-23 * a
				}
			}
		}
	}
	return hard, widthSq, slack
}

// TestSparseQuantAllreduce: every algorithm that supports a lossy codec
// (and AlgoAuto, and the exact dense end forced) x every lossy kind x float32 and float64 x P = 1..6 x
// densities: results within the derived bound of the exact sum, indices
// exact, all ranks bit-identical, and the bytes each rank sent equal to
// PredictSparseExact's.
func TestSparseQuantAllreduce(t *testing.T) {
	testSparseQuant[float32](t, 0x1p-24)
	testSparseQuant[float64](t, 0x1p-53)
}

func testSparseQuant[T collectives.Float](t *testing.T, eps float64) {
	rng := rand.New(rand.NewPCG(21, uint64(sparse.ValueSize[T]())))
	const dim = 1500
	// AlgoRing forces the dense end of the switch, which stays exact.
	for _, algo := range append(slices.Clone(spqAlgos), collectives.AlgoRing) {
		for _, kind := range spqKinds {
			worst := 0.0 // largest error/bound seen, reported to show the bound's slack
			for p := 1; p <= 6; p++ {
				for _, density := range []string{"zero", "single", "1%", "50%"} {
					name := fmt.Sprintf("%T %v %v P=%d %s", T(0), algo, kind, p, density)
					in := spqInputs[T](rng, p, dim, density)
					opts := collectives.SparseOptions{Algo: algo, Quant: kind}
					outs, stats, sent := spqRun(t, in, opts, uint64(p))
					ref := newSpqRef(in)
					got := stats[0].Algo
					if kind != quant.None && got == collectives.AlgoSSARRecursiveDoubling {
						t.Fatalf("%s: AlgoAuto chose %v under a lossy codec", name, got)
					}
					bounds := stats[0].Bounds
					bound := spqBounds(ref, kind, got, bounds, eps)
					for r, out := range outs {
						if !spSameBits(outs[0], out) {
							t.Fatalf("%s: rank %d's result differs from rank 0's", name, r)
						}
						if err := spqCheck(out, ref, bound); err != nil {
							t.Fatalf("%s (ran %v): rank %d: %v", name, got, r, err)
						}
					}
					for i, x := range outs[0].ToDense(nil) {
						if d := math.Abs(float64(x) - ref.sum[i]); d > 0 {
							worst = max(worst, d/bound[i])
						}
					}
					if p > 1 {
						pred := collectives.PredictSparseExact(collectives.DefaultCostModel, got, in, opts, bounds)
						if !slices.Equal(pred.BytesSent, sent) {
							t.Fatalf("%s (ran %v): bytes sent per rank %v, predicted %v", name, got, sent, pred.BytesSent)
						}
					}
				}
			}
			if worst == 0 && algo != collectives.AlgoRing {
				t.Fatalf("%T %v %v: no result was rounded at all", T(0), algo, kind)
			}
			t.Logf("%T %v %v: worst error %.2f of the bound", T(0), algo, kind, worst)
		}
	}
}

// spqCheck compares a result with the reference: every position of the
// union of the inputs' supports stored (indices travel exactly), any other
// stored position exactly zero, every value within its bound.
func spqCheck[T collectives.Float](got *sparse.Vector[T], ref spqRef, bound []float64) error {
	if err := got.Validate(); err != nil {
		return err
	}
	if got.Dim != len(ref.sum) {
		return fmt.Errorf("dimension %d, want %d", got.Dim, len(ref.sum))
	}
	stored := make([]bool, got.Dim)
	check := func(i int, x T) error {
		stored[i] = true
		if !ref.union[i] && x != 0 {
			return fmt.Errorf("index %d outside every input's support holds %v", i, x)
		}
		if d := math.Abs(float64(x) - ref.sum[i]); !(d <= bound[i]) {
			return fmt.Errorf("index %d: got %v, exact %v: error %.3g above the bound %.3g", i, x, ref.sum[i], d, bound[i])
		}
		return nil
	}
	if got.Dense {
		for i, x := range got.Values {
			if err := check(i, x); err != nil {
				return err
			}
		}
		return nil
	}
	for k, i := range got.Indices {
		if err := check(int(i), got.Values[k]); err != nil {
			return err
		}
	}
	for i, u := range ref.union {
		if u && !stored[i] {
			return fmt.Errorf("index %d of the inputs' support is missing", i)
		}
	}
	return nil
}

// TestSparseQuantUnbiased: with the stochastic kinds, the mean of many
// trials (fresh seeds on every rank each time) converges to the exact sum:
// every element's mean lies within the Azuma-Hoeffding bound of
// spqErrModel (delta = 1e-6 over all elements), and so does the mean
// signed error over all elements, against its own, tighter bound.
func TestSparseQuantUnbiased(t *testing.T) {
	const p, dim, trials, delta = 4, 2000, 300, 1e-6
	for _, algo := range spqAlgos[:3] {
		for _, kind := range []quant.Kind{quant.Q8, quant.Q4, quant.Q2} {
			spqUnbiased[float32](t, p, dim, trials, delta, algo, kind, 0x1p-24)
			if kind == quant.Q4 {
				spqUnbiased[float64](t, p, dim, trials, delta, algo, kind, 0x1p-53)
			}
		}
	}
}

func spqUnbiased[T collectives.Float](t *testing.T, p, dim, trials int, delta float64, algo collectives.Algo, kind quant.Kind, eps float64) {
	in := spqInputs[T](rand.New(rand.NewPCG(31, 31)), p, dim, "50%")
	sums := make([]float64, dim)
	var bounds []int
	errs := coltest.Run(t, p, 60*time.Second, func(ctx context.Context, tr transport.Transport) error {
		r := tr.Rank()
		out := &sparse.Vector[T]{}
		dense := make([]T, dim)
		for trial := range trials {
			opts := collectives.SparseOptions{Algo: algo, Quant: kind, QuantSeed: uint64(trial)<<8 | uint64(r)}
			st, err := collectives.SparseAllreduce(coltest.NewOp(ctx, tr, uint64(trial+1), transport.Desc{}), in[r], out, opts)
			if err != nil {
				return err
			}
			if r == 0 {
				bounds = st.Bounds
				for i, x := range out.ToDense(dense) {
					sums[i] += float64(x)
				}
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	ref := newSpqRef(in)
	_, widthSq, slack := spqErrModel(ref, kind, algo, bounds, eps)
	nt, nn := float64(trials), float64(dim)
	worst, mean, meanWidthSq, meanSlack := 0.0, 0.0, 0.0, 0.0
	for i := range dim {
		dev := sums[i]/nt - ref.sum[i]
		bound := math.Sqrt(widthSq[i]*math.Log(2*nn/delta)/(2*nt)) + slack[i]
		if !(math.Abs(dev) <= bound) {
			t.Fatalf("%T %v %v: element %d: mean %v over %d trials, exact %v, bound %.3g", T(0), algo, kind, i, sums[i]/nt, trials, ref.sum[i], bound)
		}
		if bound > 0 {
			worst = max(worst, math.Abs(dev)/bound)
		}
		mean += dev / nn
		meanWidthSq += widthSq[i] / nn
		meanSlack += slack[i] / nn
	}
	// The mean over elements of independent per-element means: a sum of
	// nn*nt martingale differences, each of range sqrt(widthSq[i]).
	aggregate := math.Sqrt(meanWidthSq*math.Log(2/delta)/(2*nt*nn)) + meanSlack
	if !(math.Abs(mean) <= aggregate) {
		t.Fatalf("%T %v %v: mean error over all elements %.3g, bound %.3g", T(0), algo, kind, mean, aggregate)
	}
	t.Logf("%T %v %v: worst element at %.2f of its bound; mean error %.2g (bound %.2g)", T(0), algo, kind, worst, mean, aggregate)
}

// TestSparseQuantBytes: q4 at 1% density sends at most 0.6x the bytes of
// the float32 sparse allreduce on every rank (counted by the transport),
// for every algorithm that supports it.
func TestSparseQuantBytes(t *testing.T) {
	const p, dim = 4, 1 << 18
	in := spqInputs[float32](rand.New(rand.NewPCG(41, 41)), p, dim, "1%")
	for _, algo := range spqAlgos {
		_, _, exact := spqRun(t, in, collectives.SparseOptions{Algo: algo}, 1)
		_, _, q4 := spqRun(t, in, collectives.SparseOptions{Algo: algo, Quant: quant.Q4}, 1)
		for r := range p {
			ratio := float64(q4[r]) / float64(exact[r])
			if ratio > 0.6 {
				t.Fatalf("%v: rank %d sent %d bytes with q4, %d exact: %.2fx", algo, r, q4[r], exact[r], ratio)
			}
		}
		t.Logf("%v: rank 0 sent %d bytes with q4, %d exact (%.3fx)", algo, q4[0], exact[0], float64(q4[0])/float64(exact[0]))
	}
}

// TestSparseQuantModelBytes: the model AlgoAuto decides with, which knows
// only entry counts, predicts the bytes every rank sends within 10% for
// uniformly spread supports, for every lossy kind; PredictSparseExact,
// from the real supports, is exact (TestSparseQuantAllreduce checks that
// on every case).
func TestSparseQuantModelBytes(t *testing.T) {
	const p, dim = 4, 1 << 18
	for _, density := range []string{"1%", "50%"} {
		in := spqInputs[float32](rand.New(rand.NewPCG(51, 51)), p, dim, density)
		nnz := make([]int, p)
		for r, v := range in {
			nnz[r] = v.NNZ()
		}
		for _, algo := range spqAlgos[:3] {
			for _, kind := range spqKinds {
				_, _, sent := spqRun(t, in, collectives.SparseOptions{Algo: algo, Quant: kind}, 2)
				model := collectives.DefaultCostModel.PredictSparseQuant(algo, p, dim, 4, kind, nnz)
				for r := range p {
					rel := float64(model.BytesSent[r])/float64(sent[r]) - 1
					if math.Abs(rel) > 0.10 {
						t.Fatalf("%s %v %v: rank %d sent %d bytes, model %d (%+.1f%%)", density, algo, kind, r, sent[r], model.BytesSent[r], 100*rel)
					}
				}
				t.Logf("%s %v %v: rank 0 sent %d, model %d", density, algo, kind, sent[0], model.BytesSent[0])
			}
		}
	}
}

// TestSparseQuantRecursiveDoublingRefused: forcing SSAR recursive
// doubling with a lossy codec fails with ErrInvalid on the calling ranks
// and fails every rank; AlgoAuto never picks it under a lossy kind.
func TestSparseQuantRecursiveDoublingRefused(t *testing.T) {
	for _, p := range []int{1, 2, 5} {
		in := spqInputs[float32](rand.New(rand.NewPCG(61, 61)), p, 100, "1%")
		errs := coltest.Run(t, p, 10*time.Second, func(ctx context.Context, tr transport.Transport) error {
			opts := collectives.SparseOptions{Algo: collectives.AlgoSSARRecursiveDoubling, Quant: quant.Q8, QuantSeed: uint64(tr.Rank())}
			_, err := collectives.SparseAllreduce(coltest.NewOp(ctx, tr, 1, transport.Desc{}), in[tr.Rank()], &sparse.Vector[float32]{}, opts)
			return err
		})
		for r, err := range errs {
			if !errors.Is(err, transport.ErrInvalid) && !errors.Is(err, transport.ErrAborted) {
				t.Fatalf("P=%d rank %d: %v", p, r, err)
			}
			if errors.Is(err, transport.ErrInvalid) && !strings.Contains(err.Error(), "re-quantizes") {
				t.Fatalf("P=%d rank %d: unclear error %v", p, r, err)
			}
		}
	}
	m := collectives.DefaultCostModel
	for _, p := range []int{2, 3, 4, 8, 64} {
		for _, k := range []int{0, 1, 10, 1000, 1 << 16, 1 << 20} {
			nnz := slices.Repeat([]int{k}, p)
			for _, kind := range spqKinds {
				if a := m.ChooseSparseOrDenseQuant(p, 1<<20, 4, kind, nnz); a == collectives.AlgoSSARRecursiveDoubling {
					t.Fatalf("P=%d k=%d %v: chose %v", p, k, kind, a)
				}
			}
		}
	}
}

// TestSparseQuantMismatch: ranks passing different codecs fail with
// ErrMismatch on every rank (the descriptor carries the codec), forced
// algorithm or AlgoAuto, allreduce or allgather.
func TestSparseQuantMismatch(t *testing.T) {
	const p = 4
	in := spqInputs[float32](rand.New(rand.NewPCG(71, 71)), p, 300, "1%")
	for _, algo := range spqAlgos {
		for _, other := range []quant.Kind{quant.None, quant.Q8} {
			errs := coltest.Run(t, p, 10*time.Second, func(ctx context.Context, tr transport.Transport) error {
				kind := quant.Q4
				if tr.Rank() == 2 {
					kind = other
				}
				opts := collectives.SparseOptions{Algo: algo, Quant: kind, QuantSeed: uint64(tr.Rank())}
				_, err := collectives.SparseAllreduce(coltest.NewOp(ctx, tr, 1, transport.Desc{}), in[tr.Rank()], &sparse.Vector[float32]{}, opts)
				return err
			})
			spqRequireMismatch(t, fmt.Sprintf("%v q4 vs %v", algo, other), errs)
		}
	}
	errs := coltest.Run(t, p, 10*time.Second, func(ctx context.Context, tr transport.Transport) error {
		opts := collectives.SparseAllgatherOptions{Quant: quant.BF16}
		if tr.Rank() == 0 {
			opts.Quant = quant.FP16
		}
		_, err := collectives.SparseAllgatherWith(coltest.NewOp(ctx, tr, 1, transport.Desc{}), in[tr.Rank()], nil, opts)
		return err
	})
	spqRequireMismatch(t, "allgather bf16 vs fp16", errs)
}

func spqRequireMismatch(t *testing.T, name string, errs []error) {
	t.Helper()
	seen := false
	for r, err := range errs {
		if !errors.Is(err, transport.ErrMismatch) && !errors.Is(err, transport.ErrAborted) {
			t.Fatalf("%s: rank %d: %v", name, r, err)
		}
		seen = seen || errors.Is(err, transport.ErrMismatch)
	}
	if !seen {
		t.Fatalf("%s: no rank reported the mismatch: %v", name, errs)
	}
}

// TestSparseQuantAllgather: SparseAllgatherWith gives every rank the same
// bits for every rank's vector, each with exact indices and values within
// one quantization of the input.
func TestSparseQuantAllgather(t *testing.T) {
	for _, kind := range spqKinds {
		for _, p := range []int{1, 2, 3, 6} {
			in := spqInputs[float64](rand.New(rand.NewPCG(81, uint64(p))), p, 700, "50%")
			got := make([][]*sparse.Vector[float64], p)
			errs := coltest.Run(t, p, 10*time.Second, func(ctx context.Context, tr transport.Transport) error {
				r := tr.Rank()
				var err error
				opts := collectives.SparseAllgatherOptions{Quant: kind, QuantSeed: uint64(r)}
				got[r], err = collectives.SparseAllgatherWith(coltest.NewOp(ctx, tr, 1, transport.Desc{}), in[r], nil, opts)
				return err
			})
			for r := range p {
				if errs[r] != nil {
					t.Fatalf("%v P=%d: rank %d: %v", kind, p, r, errs[r])
				}
				for q := range p {
					if !spSameBits(got[0][q], got[r][q]) {
						t.Fatalf("%v P=%d: rank %d's copy of rank %d's vector differs from rank 0's", kind, p, r, q)
					}
					maxAbs := 0.0
					for _, x := range in[q].Values {
						maxAbs = max(maxAbs, math.Abs(x))
					}
					want, have := in[q].ToDense(nil), got[r][q].ToDense(nil)
					for i := range want {
						e := 0.0
						if p > 1 && want[i] != 0 {
							e = spqQuantErr(kind, want[i], maxAbs)
						}
						if !(math.Abs(have[i]-want[i]) <= e) {
							t.Fatalf("%v P=%d: rank %d's copy of rank %d, index %d: %v for %v", kind, p, r, q, i, have[i], want[i])
						}
					}
				}
			}
		}
	}
}
