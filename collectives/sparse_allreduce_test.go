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
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// spAlgoCase is one way of calling SparseAllreduce.
type spAlgoCase struct {
	name string
	opts collectives.SparseOptions
}

var spAlgoCases = []spAlgoCase{
	{"rd", collectives.SparseOptions{Algo: collectives.AlgoSSARRecursiveDoubling}},
	{"split", collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather}},
	{"split-balanced", collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather, Balanced: true}},
	{"dsar", collectives.SparseOptions{Algo: collectives.AlgoDSAR}},
	{"dsar-balanced", collectives.SparseOptions{Algo: collectives.AlgoDSAR, Balanced: true}},
	{"allgather", collectives.SparseOptions{Algo: collectives.AlgoSparseAllgather}},
	{"auto", collectives.SparseOptions{Algo: collectives.AlgoAuto}},
	{"rd-denseout", collectives.SparseOptions{Algo: collectives.AlgoSSARRecursiveDoubling, DenseOut: true}},
	{"split-denseout", collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather, DenseOut: true}},
	// Packed indices on every algorithm: the same sums, bytes as predicted.
	{"rd-packed", collectives.SparseOptions{Algo: collectives.AlgoSSARRecursiveDoubling, Indices: collectives.IndexPacked}},
	{"split-packed", collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather, Indices: collectives.IndexPacked}},
	{"split-balanced-packed", collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather, Balanced: true, Indices: collectives.IndexPacked}},
	{"dsar-packed", collectives.SparseOptions{Algo: collectives.AlgoDSAR, Indices: collectives.IndexPacked}},
	{"allgather-packed", collectives.SparseOptions{Algo: collectives.AlgoSparseAllgather, Indices: collectives.IndexPacked}},
	{"auto-packed", collectives.SparseOptions{Algo: collectives.AlgoAuto, Indices: collectives.IndexPacked}},
}

// Support patterns of the generated inputs.
var spKinds = []string{"zero", "single", "1%", "50%", "100%", "identical", "disjoint", "skewed", "mixed"}

// spInputs returns every rank's input for a pattern. Values are small
// integers so that every summation order gives the same exact result.
func spInputs[T collectives.Float](rng *rand.Rand, p, dim int, kind string) []*sparse.Vector[T] {
	// Huge dimensions only ever get a few entries: tests stay cheap.
	capped := func(n int) int { return min(n, 300) }
	vals := func(n int) []T {
		v := make([]T, n)
		for i := range v {
			v[i] = T(rng.IntN(15) - 7)
		}
		return v
	}
	support := func(n int) []uint32 {
		n = min(n, dim)
		seen := map[uint32]bool{}
		var idx []uint32
		if 2*n > dim {
			for i := 0; i < dim; i++ {
				if rng.IntN(dim-i) < n-len(idx) {
					idx = append(idx, uint32(i))
				}
			}
			return idx
		}
		for len(idx) < n {
			x := uint32(rng.Int64N(int64(dim)))
			if !seen[x] {
				seen[x] = true
				idx = append(idx, x)
			}
		}
		slices.Sort(idx)
		return idx
	}
	mk := func(idx []uint32) *sparse.Vector[T] {
		return &sparse.Vector[T]{Dim: dim, Indices: idx, Values: vals(len(idx))}
	}
	shared := support(capped(max(dim/10, 1)))
	out := make([]*sparse.Vector[T], p)
	for r := range out {
		switch kind {
		case "zero":
			out[r] = mk(nil)
		case "single":
			out[r] = mk(support(1))
		case "1%":
			out[r] = mk(support(capped(dim / 100)))
		case "50%":
			out[r] = mk(support(capped(dim / 2)))
		case "100%":
			if dim > 1<<16 {
				out[r] = mk(support(capped(dim)))
			} else {
				out[r] = &sparse.Vector[T]{Dim: dim, Dense: true, Values: vals(dim)}
				if r%2 == 1 { // the same density handed in sparse form
					out[r] = sparse.FromDense(out[r].Values)
					out[r].Indices = support(dim)
					out[r].Values = vals(dim)
				}
			}
		case "identical":
			out[r] = mk(slices.Clone(shared))
		case "disjoint":
			var idx []uint32
			for _, x := range support(capped(max(dim/(2*p), 1))) {
				if int(x)%p == r {
					idx = append(idx, x)
				}
			}
			out[r] = mk(idx)
		case "skewed":
			// Power law: most entries near index 0.
			seen := map[uint32]bool{}
			var idx []uint32
			for range min(capped(max(dim/20, 1)), dim) {
				x := uint32(float64(dim) * math.Pow(rng.Float64(), 6))
				if !seen[x] {
					seen[x] = true
					idx = append(idx, x)
				}
			}
			slices.Sort(idx)
			out[r] = mk(idx)
		case "mixed":
			n := []int{0, 1, capped(dim / 50), capped(dim / 3)}[rng.IntN(4)]
			out[r] = mk(support(n))
		}
	}
	return out
}

// spReference sums the inputs into a map (huge dimensions stay cheap).
func spReference[T collectives.Float](in []*sparse.Vector[T]) map[int]T {
	ref := map[int]T{}
	for _, v := range in {
		if v.Dense {
			for i, x := range v.Values {
				ref[i] += x
			}
			continue
		}
		for i, x := range v.Indices {
			ref[int(x)] += v.Values[i]
		}
	}
	return ref
}

// spCheckResult compares a result with the reference: every stored value
// equal to the sum at its index, every reference nonzero present.
func spCheckResult[T collectives.Float](got *sparse.Vector[T], ref map[int]T, dim int) error {
	if err := got.Validate(); err != nil {
		return err
	}
	if got.Dim != dim {
		return fmt.Errorf("dimension %d, want %d", got.Dim, dim)
	}
	stored := map[int]bool{}
	at := func(i int, x T) error {
		stored[i] = true
		if ref[i] != x {
			return fmt.Errorf("index %d: got %v, want %v", i, x, ref[i])
		}
		return nil
	}
	if got.Dense {
		for i, x := range got.Values {
			if err := at(i, x); err != nil {
				return err
			}
		}
	} else {
		for k, i := range got.Indices {
			if err := at(int(i), got.Values[k]); err != nil {
				return err
			}
		}
	}
	for i, x := range ref {
		if x != 0 && !stored[i] {
			return fmt.Errorf("index %d: missing, want %v", i, x)
		}
	}
	return nil
}

// spRun runs SparseAllreduce on every rank and returns the outputs, stats
// and payload bytes each rank sent.
func spRun[T collectives.Float](t testing.TB, in []*sparse.Vector[T], opts collectives.SparseOptions) ([]*sparse.Vector[T], []collectives.SparseStats, []int64, []error) {
	outs, stats, sent, _, errs := spRunCounting(t, in, opts)
	return outs, stats, sent, errs
}

// spRunCounting is spRun that also returns the messages each rank sent.
func spRunCounting[T collectives.Float](t testing.TB, in []*sparse.Vector[T], opts collectives.SparseOptions) ([]*sparse.Vector[T], []collectives.SparseStats, []int64, []int64, []error) {
	p := len(in)
	outs := make([]*sparse.Vector[T], p)
	stats := make([]collectives.SparseStats, p)
	sent, msgs := make([]int64, p), make([]int64, p)
	errs := coltest.Run(t, p, 20*time.Second, func(ctx context.Context, tr transport.Transport) error {
		r := tr.Rank()
		op := coltest.NewOp(ctx, tr, 7, transport.Desc{})
		before := tr.Stats()
		outs[r] = &sparse.Vector[T]{}
		var err error
		stats[r], err = collectives.SparseAllreduce(op, in[r], outs[r], opts)
		d := tr.Stats().Sub(before)
		sent[r], msgs[r] = int64(d.BytesSent), int64(d.MsgsSent)
		return err
	})
	return outs, stats, sent, msgs, errs
}

func testSparseAllreduceProperty[T collectives.Float](t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	dims := []int{0, 1, 2, 7, 64, 1000, 1<<25 + 3}
	for _, ac := range spAlgoCases {
		t.Run(ac.name, func(t *testing.T) {
			for range 40 {
				p := 1 + rng.IntN(9)
				dim := dims[rng.IntN(len(dims))]
				kind := spKinds[rng.IntN(len(spKinds))]
				if (ac.opts.Algo == collectives.AlgoDSAR || ac.opts.DenseOut) && dim > 1<<20 {
					dim = 1000 // dense results of 2^25 per rank are not cheap
				}
				in := spInputs[T](rng, p, dim, kind)
				name := fmt.Sprintf("P=%d dim=%d %s", p, dim, kind)
				outs, stats, sent, errs := spRun(t, in, ac.opts)
				for r, err := range errs {
					if err != nil {
						t.Fatalf("%s: rank %d: %v", name, r, err)
					}
				}
				ref := spReference(in)
				for r, out := range outs {
					if err := spCheckResult(out, ref, dim); err != nil {
						t.Fatalf("%s: rank %d: %v", name, r, err)
					}
					if !spSameBits(outs[0], out) {
						t.Fatalf("%s: rank %d's result differs from rank 0's", name, r)
					}
					if stats[r].Algo != stats[0].Algo {
						t.Fatalf("%s: rank %d ran %v, rank 0 %v", name, r, stats[r].Algo, stats[0].Algo)
					}
					wantDense := ac.opts.DenseOut || stats[r].Algo == collectives.AlgoDSAR ||
						sparse.PreferDense(out.NNZ(), dim, sparse.ValueSize[T]())
					if p > 1 && out.Dense != wantDense {
						t.Fatalf("%s: rank %d: dense=%v with %d entries", name, r, out.Dense, out.NNZ())
					}
				}
				// The byte accounting is exact: measured == predicted.
				if p > 1 {
					pred := collectives.PredictSparseExact(collectives.DefaultCostModel, stats[0].Algo, in, ac.opts, stats[0].Bounds)
					if !slices.Equal(pred.BytesSent, sent) {
						t.Fatalf("%s %v: bytes sent per rank %v, predicted %v", name, stats[0].Algo, sent, pred.BytesSent)
					}
				}
			}
		})
	}
}

func spSameBits[T collectives.Float](a, b *sparse.Vector[T]) bool {
	if a.Dense != b.Dense || a.Dim != b.Dim || !slices.Equal(a.Indices, b.Indices) || len(a.Values) != len(b.Values) {
		return false
	}
	for i := range a.Values {
		if math.Float64bits(float64(a.Values[i])) != math.Float64bits(float64(b.Values[i])) {
			return false
		}
	}
	return true
}

func TestSparseAllreduceFloat32(t *testing.T) { testSparseAllreduceProperty[float32](t, 1) }
func TestSparseAllreduceFloat64(t *testing.T) { testSparseAllreduceProperty[float64](t, 2) }

// TestSparseAllreduceRealValues checks non-integer values against a dense
// reference within rounding, and that all ranks still agree bit for bit.
func TestSparseAllreduceRealValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, ac := range spAlgoCases[:6] {
		p, dim := 6, 500
		in := make([]*sparse.Vector[float64], p)
		ref := make([]float64, dim)
		for r := range in {
			in[r] = spInputs[float64](rng, 1, dim, "50%")[0]
			for i := range in[r].Values {
				in[r].Values[i] = rng.NormFloat64()
			}
			for i, x := range in[r].ToDense(nil) {
				ref[i] += x
			}
		}
		outs, _, _, errs := spRun(t, in, ac.opts)
		for r := range outs {
			if errs[r] != nil {
				t.Fatalf("%s: rank %d: %v", ac.name, r, errs[r])
			}
			for i, x := range outs[r].ToDense(nil) {
				if math.Abs(x-ref[i]) > 1e-12 {
					t.Fatalf("%s: rank %d index %d: %v, want %v", ac.name, r, i, x, ref[i])
				}
			}
			if !spSameBits(outs[0], outs[r]) {
				t.Fatalf("%s: ranks 0 and %d differ", ac.name, r)
			}
		}
	}
}

// TestSparseAllreduceBadInputFailsEverywhere: one rank's invalid input
// fails the operation on every rank, the bad rank naming the position.
func TestSparseAllreduceBadInputFailsEverywhere(t *testing.T) {
	bad := map[string]*sparse.Vector[float32]{
		"unsorted":     {Dim: 100, Indices: []uint32{5, 3}, Values: []float32{1, 1}},
		"duplicate":    {Dim: 100, Indices: []uint32{5, 5}, Values: []float32{1, 1}},
		"out of range": {Dim: 100, Indices: []uint32{5, 100}, Values: []float32{1, 1}},
		"lengths":      {Dim: 100, Indices: []uint32{5}, Values: nil},
	}
	for name, v := range bad {
		for _, ac := range spAlgoCases {
			const p, badRank = 5, 3
			in := spInputs[float32](rand.New(rand.NewPCG(4, 4)), p, 100, "1%")
			in[badRank] = v
			_, _, _, errs := spRun(t, in, ac.opts)
			for r, err := range errs {
				if err == nil {
					t.Fatalf("%s/%s: rank %d succeeded", name, ac.name, r)
				}
				if r == badRank {
					if !errors.Is(err, transport.ErrInvalid) || (name != "lengths" && !strings.Contains(err.Error(), "position 1")) {
						t.Fatalf("%s/%s: bad rank's error %v does not name the position", name, ac.name, err)
					}
				} else if !strings.Contains(err.Error(), "rank 3") {
					t.Fatalf("%s/%s: rank %d's error %v does not name rank 3", name, ac.name, r, err)
				}
			}
		}
	}
}

// TestSparseAllreduceDimensionMismatch: ranks disagreeing on the dimension
// fail everywhere (the descriptor check), never sum.
func TestSparseAllreduceDimensionMismatch(t *testing.T) {
	for _, ac := range spAlgoCases {
		for _, p := range []int{2, 3, 8} {
			in := spInputs[float64](rand.New(rand.NewPCG(5, 5)), p, 50, "50%")
			in[p-1] = spInputs[float64](rand.New(rand.NewPCG(6, 6)), 1, 51, "50%")[0]
			_, _, _, errs := spRun(t, in, ac.opts)
			mismatch := false
			for r, err := range errs {
				if err == nil {
					t.Fatalf("%s P=%d: rank %d succeeded", ac.name, p, r)
				}
				mismatch = mismatch || errors.Is(err, transport.ErrMismatch)
				if !errors.Is(err, transport.ErrMismatch) && !errors.Is(err, transport.ErrAborted) {
					t.Fatalf("%s P=%d: rank %d: unexpected error %v", ac.name, p, r, err)
				}
			}
			if !mismatch {
				t.Fatalf("%s P=%d: no rank reported the mismatch: %v", ac.name, p, errs)
			}
		}
	}
}

// TestSparseAllreduceOptionsMismatch: with AlgoAuto or Balanced the ranks
// check each other's options.
func TestSparseAllreduceOptionsMismatch(t *testing.T) {
	const p = 4
	in := spInputs[float32](rand.New(rand.NewPCG(7, 7)), p, 100, "1%")
	errs := coltest.Run(t, p, 10*time.Second, func(ctx context.Context, tr transport.Transport) error {
		opts := collectives.SparseOptions{Algo: collectives.AlgoAuto, Balanced: tr.Rank() != 2}
		_, err := collectives.SparseAllreduce(coltest.NewOp(ctx, tr, 1, transport.Desc{}), in[tr.Rank()], &sparse.Vector[float32]{}, opts)
		return err
	})
	for r, err := range errs {
		if !errors.Is(err, transport.ErrMismatch) && !errors.Is(err, transport.ErrAborted) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestSparseAllreduceDenseOutReusesBuffer: a caller's dense buffer
// receives the result without a new allocation.
func TestSparseAllreduceDenseOutReusesBuffer(t *testing.T) {
	const p, dim = 3, 300
	in := spInputs[float32](rand.New(rand.NewPCG(8, 8)), p, dim, "1%")
	bufs := make([][]float32, p)
	errs := coltest.Run(t, p, 10*time.Second, func(ctx context.Context, tr transport.Transport) error {
		r := tr.Rank()
		bufs[r] = make([]float32, dim)
		out := sparse.NewDense(bufs[r])
		for i, ac := range spAlgoCases[:6] {
			opts := ac.opts
			opts.DenseOut = true
			if _, err := collectives.SparseAllreduce(coltest.NewOp(ctx, tr, uint64(i+1), transport.Desc{}), in[r], out, opts); err != nil {
				return err
			}
			if !out.Dense || &out.Values[0] != &bufs[r][0] {
				return fmt.Errorf("%s: result not in the caller's buffer", ac.name)
			}
			if err := spCheckResult(out, spReference(in), dim); err != nil {
				return fmt.Errorf("%s: %w", ac.name, err)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func TestSparseAllgather(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, p := range []int{1, 2, 3, 5, 8, 9} {
		for _, kind := range spKinds {
			in := spInputs[float64](rng, p, 200, kind)
			got := make([][]*sparse.Vector[float64], p)
			errs := coltest.Run(t, p, 10*time.Second, func(ctx context.Context, tr transport.Transport) error {
				var err error
				got[tr.Rank()], err = collectives.SparseAllgather(coltest.NewOp(ctx, tr, 1, transport.Desc{}), in[tr.Rank()], nil)
				return err
			})
			for r := range p {
				if errs[r] != nil {
					t.Fatalf("P=%d %s rank %d: %v", p, kind, r, errs[r])
				}
				for q := range p {
					if !slices.Equal(got[r][q].ToDense(nil), in[q].ToDense(nil)) {
						t.Fatalf("P=%d %s: rank %d's copy of rank %d's vector differs", p, kind, r, q)
					}
				}
			}
		}
	}
}

// TestSparseBalancedRangesEvenOutOwners: on a power-law support, ranges
// from index quantiles put far fewer entries on the busiest owner than
// equal ranges: when asked (Balanced), and under AlgoAuto when it runs
// ssar-split; under AlgoAuto DSAR keeps equal ranges.
func TestSparseBalancedRangesEvenOutOwners(t *testing.T) {
	const p, dim = 8, 1 << 20
	// Power law, most entries near index 0, more entries in all than
	// SSAR recursive doubling is considered for (rdMaxEntries), so that
	// the split algorithms are AlgoAuto's candidates.
	rng := rand.New(rand.NewPCG(10, 10))
	in := make([]*sparse.Vector[float32], p)
	for r := range in {
		idx := make([]uint32, 3000)
		for i := range idx {
			idx[i] = uint32(float64(dim) * math.Pow(rng.Float64(), 6))
		}
		v, err := sparse.FromUnsorted(dim, idx, slices.Repeat([]float32{1}, len(idx)))
		if err != nil {
			t.Fatal(err)
		}
		in[r] = v
	}
	equal := make([]int, p+1)
	for i := range equal {
		equal[i] = dim * i / p
	}
	maxLoad := func(bounds []int) (worst, total int) {
		for q := range p {
			load := 0
			for _, v := range in {
				for _, x := range v.Indices {
					if int(x) >= bounds[q] && int(x) < bounds[q+1] {
						load++
					}
				}
			}
			worst, total = max(worst, load), total+load
		}
		return worst, total
	}
	nnz := make([]int, p)
	for r, v := range in {
		nnz[r] = v.NNZ()
	}
	// Models under which AlgoAuto picks each split algorithm here: slow
	// sparse merges with a fast network favour ssar-split, whose owners
	// each merge an eighth of what allgather has every rank merge; a
	// merge slower still, and a network faster, DSAR's dense sums.
	splitModel := collectives.CostModel{Alpha: 1e-9, Beta: 1e-8, Gamma: 1e-9, SparseGamma: 1e-7}
	dsarModel := collectives.CostModel{Alpha: 1e-9, Beta: 1e-9, Gamma: 1e-9, SparseGamma: 1e-6}
	for _, tc := range []struct {
		name     string
		opts     collectives.SparseOptions
		want     collectives.Algo
		balanced bool
	}{
		{"ssar-split balanced", collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather, Balanced: true}, collectives.AlgoSSARSplitAllgather, true},
		{"auto ssar-split", collectives.SparseOptions{Algo: collectives.AlgoAuto, Model: splitModel}, collectives.AlgoSSARSplitAllgather, true},
		{"auto dsar", collectives.SparseOptions{Algo: collectives.AlgoAuto, Model: dsarModel}, collectives.AlgoDSAR, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.opts.Algo == collectives.AlgoAuto {
				if a := tc.opts.Model.ChooseSparseOrDense(p, dim, 4, nnz); a != tc.want {
					t.Fatalf("the model chooses %v, not %v: the case no longer tests it", a, tc.want)
				}
			}
			_, stats, _, errs := spRun(t, in, tc.opts)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if stats[0].Algo != tc.want {
				t.Fatalf("ran %v, want %v", stats[0].Algo, tc.want)
			}
			if !tc.balanced {
				if !slices.Equal(stats[0].Bounds, equal) {
					t.Fatalf("bounds %v, want equal ranges %v", stats[0].Bounds, equal)
				}
				return
			}
			eq, total := maxLoad(equal)
			bal, _ := maxLoad(stats[0].Bounds)
			t.Logf("busiest owner: %d entries with equal ranges, %d balanced (ideal %d)", eq, bal, total/p)
			if bal*2 > eq || bal > 2*total/p {
				t.Fatalf("balanced ranges do not balance: busiest owner %d vs %d equal, ideal %d", bal, eq, total/p)
			}
		})
	}
}

// TestChooseSparse checks the model's choices at the extremes.
func TestChooseSparse(t *testing.T) {
	m := collectives.DefaultCostModel
	counts := func(p, k int) []int {
		c := make([]int, p)
		for i := range c {
			c[i] = k
		}
		return c
	}
	const dim = 1 << 24
	if a := m.ChooseSparse(16, dim, 4, counts(16, dim)); a != collectives.AlgoDSAR {
		t.Fatalf("dense inputs: chose %v, want dsar", a)
	}
	if a := m.ChooseSparse(16, dim, 4, counts(16, 10)); a == collectives.AlgoDSAR {
		t.Fatalf("10 entries per rank: chose dsar")
	}
	// At large P with moderate density, allgather's linear growth loses.
	if a := m.ChooseSparse(64, dim, 4, counts(64, dim/1000)); a == collectives.AlgoSparseAllgather {
		t.Fatalf("P=64 at 0.1%%: chose allgather")
	}
	for _, a := range []collectives.Algo{collectives.AlgoSSARRecursiveDoubling, collectives.AlgoSSARSplitAllgather, collectives.AlgoDSAR, collectives.AlgoSparseAllgather} {
		pr := m.PredictSparse(a, 8, dim, 4, counts(8, dim/100))
		if pr.Seconds <= 0 || len(pr.BytesSent) != 8 {
			t.Fatalf("%v: prediction %+v", a, pr)
		}
	}
}

// TestSparseAllreduceMissingRank: a rank that never calls makes the others
// fail at their deadline instead of hanging. (Which rank names the missing
// one depends on who times out first: the first to fail tells the others.)
func TestSparseAllreduceMissingRank(t *testing.T) {
	const p = 3
	in := spInputs[float32](rand.New(rand.NewPCG(12, 12)), p, 100, "1%")
	for _, ac := range spAlgoCases[:7] {
		errs := coltest.Run(t, p, 10*time.Second, func(ctx context.Context, tr transport.Transport) error {
			if tr.Rank() == 2 {
				return nil
			}
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err := collectives.SparseAllreduce(coltest.NewOp(ctx, tr, 1, transport.Desc{}), in[tr.Rank()], &sparse.Vector[float32]{}, ac.opts)
			return err
		})
		named := false
		for r := range 2 {
			if errs[r] == nil {
				t.Fatalf("%s: rank %d succeeded without rank 2", ac.name, r)
			}
			msg := errs[r].Error()
			named = named || strings.Contains(msg, "rank 2") || strings.Contains(msg, "peer 2")
		}
		if !named {
			t.Logf("%s: no error names the missing rank 2: %v", ac.name, errs)
		}
	}
}

// TestSparseAllgatherFailsEverywhere: bad input on one rank, or a
// different dimension, fails SparseAllgather on every rank.
func TestSparseAllgatherFailsEverywhere(t *testing.T) {
	const p = 4
	for name, bad := range map[string]*sparse.Vector[float32]{
		"unsorted":  {Dim: 100, Indices: []uint32{7, 2}, Values: []float32{1, 1}},
		"dimension": {Dim: 101, Indices: []uint32{2}, Values: []float32{1}},
	} {
		in := spInputs[float32](rand.New(rand.NewPCG(13, 13)), p, 100, "1%")
		in[1] = bad
		errs := coltest.Run(t, p, 10*time.Second, func(ctx context.Context, tr transport.Transport) error {
			_, err := collectives.SparseAllgather(coltest.NewOp(ctx, tr, 1, transport.Desc{}), in[tr.Rank()], nil)
			return err
		})
		for r, err := range errs {
			if err == nil {
				t.Fatalf("%s: rank %d succeeded", name, r)
			}
		}
	}
}
