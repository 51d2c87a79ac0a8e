package collectives_test

import (
	"cmp"
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

// gtkInputs returns every rank's selection for a pattern: sorted indices,
// small integer values (some zero sums among them), so every order of
// summation is exact.
func gtkInputs[T collectives.Float](rng *rand.Rand, p, dim, k int, kind string) []*sparse.Vector[T] {
	in := make([]*sparse.Vector[T], p)
	shared := rng.Perm(dim)[:k]
	slices.Sort(shared)
	for r := range in {
		v := &sparse.Vector[T]{Dim: dim}
		var idx []int
		switch kind {
		case "same": // every rank selects the same indices
			idx = shared
		case "empty-one": // rank 1 selects nothing
			if r != 1 {
				idx = rng.Perm(dim)[:k]
			}
		default:
			idx = rng.Perm(dim)[:k]
		}
		idx = slices.Clone(idx)
		slices.Sort(idx)
		for _, i := range idx {
			x := T(rng.IntN(15) - 7)
			if kind == "ties" { // few magnitudes: many sums tie at the K-th
				x = T(1 - 2*rng.IntN(2))
			}
			if x == 0 {
				x = 1
			}
			v.Indices = append(v.Indices, uint32(i))
			v.Values = append(v.Values, x)
		}
		in[r] = v
	}
	return in
}

// gtkReference is the global top-k computed locally from every rank's
// selection: the sums in rank order; kept, the nonzero sums of the K
// largest magnitudes (ties by index) on an exact call, or those of
// magnitude at least threshold otherwise; and each rank's dropped entries.
func gtkReference[T collectives.Float](in []*sparse.Vector[T], k int, exact bool, threshold float64) (kept map[uint32]T, dropped []map[uint32]T) {
	sums := map[uint32]T{}
	for _, v := range in {
		for j, i := range v.Indices {
			sums[i] += v.Values[j]
		}
	}
	var nz []uint32
	for i, s := range sums {
		if s != 0 {
			nz = append(nz, i)
		}
	}
	abs := func(x T) float64 { return math.Abs(float64(x)) }
	slices.SortFunc(nz, func(a, b uint32) int {
		if c := cmp.Compare(abs(sums[b]), abs(sums[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	kept = map[uint32]T{}
	for n, i := range nz {
		if exact && n < k || !exact && abs(sums[i]) >= threshold {
			kept[i] = sums[i]
		}
	}
	dropped = make([]map[uint32]T, len(in))
	for r, v := range in {
		dropped[r] = map[uint32]T{}
		for j, i := range v.Indices {
			if _, ok := kept[i]; !ok {
				dropped[r][i] = v.Values[j]
			}
		}
	}
	return kept, dropped
}

// asMap is v's nonzero entries.
func asMap[T collectives.Float](v *sparse.Vector[T]) map[uint32]T {
	m := map[uint32]T{}
	d := v.ToDense(nil)
	for i, x := range d {
		if x != 0 {
			m[uint32(i)] = x
		}
	}
	return m
}

func sameMap[T collectives.Float](a, b map[uint32]T) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d entries, want %d", len(a), len(b))
	}
	for i, x := range b {
		if y, ok := a[i]; !ok || y != x {
			return fmt.Errorf("index %d: got %v (present %v), want %v", i, y, ok, x)
		}
	}
	return nil
}

type gtkCall[T collectives.Float] struct {
	out, dropped []*sparse.Vector[T]
	stats        []collectives.GlobalTopkStats
	threshold    []float64 // each rank's state's threshold before the call
}

// gtkRun runs calls GlobalTopk calls on in, one state per rank.
func gtkRun[T collectives.Float](t *testing.T, in []*sparse.Vector[T], calls int, st collectives.GlobalTopkState, opts collectives.GlobalTopkOptions) []gtkCall[T] {
	t.Helper()
	p := len(in)
	res := make([]gtkCall[T], calls)
	for i := range res {
		res[i] = gtkCall[T]{out: make([]*sparse.Vector[T], p), dropped: make([]*sparse.Vector[T], p),
			stats: make([]collectives.GlobalTopkStats, p), threshold: make([]float64, p)}
	}
	errs := coltest.Run(t, p, 20*time.Second, func(ctx context.Context, tr transport.Transport) error {
		r := tr.Rank()
		state := st
		for i := range res {
			res[i].out[r], res[i].dropped[r] = &sparse.Vector[T]{}, &sparse.Vector[T]{}
			res[i].threshold[r] = state.Threshold()
			var err error
			res[i].stats[r], err = collectives.GlobalTopk(coltest.NewOp(ctx, tr, uint64(i+1), transport.Desc{}), in[r], res[i].out[r], res[i].dropped[r], &state, opts)
			if err != nil {
				return err
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return res
}

// gtkCheck compares every rank's result of every call with the reference.
func gtkCheck[T collectives.Float](t *testing.T, in []*sparse.Vector[T], k int, red collectives.ReduceOp, res []gtkCall[T]) {
	t.Helper()
	p := len(in)
	for c, call := range res {
		exact := call.stats[0].Exact
		kept, dropped := gtkReference(in, k, exact, call.stats[0].Threshold)
		if red == collectives.Avg {
			for i, x := range kept {
				kept[i] = x / T(p)
			}
		}
		if exact && len(kept) > k {
			t.Fatalf("call %d: reference keeps %d > K=%d", c, len(kept), k)
		}
		for r := range p {
			if call.stats[r].Exact != exact || call.threshold[r] != call.threshold[0] || call.stats[r].Threshold != call.stats[0].Threshold {
				t.Fatalf("call %d rank %d: exact %v threshold %v (state %v), rank 0 %v %v (%v)", c, r, call.stats[r].Exact, call.stats[r].Threshold, call.threshold[r], exact, call.stats[0].Threshold, call.threshold[0])
			}
			if err := sameMap(asMap(call.out[r]), kept); err != nil {
				t.Fatalf("call %d (exact %v) rank %d: result: %v", c, exact, r, err)
			}
			if call.stats[r].Kept != len(kept) {
				t.Fatalf("call %d rank %d: Kept %d, want %d", c, r, call.stats[r].Kept, len(kept))
			}
			if err := sameMap(asMap(call.dropped[r]), dropped[r]); err != nil {
				t.Fatalf("call %d rank %d: dropped: %v", c, r, err)
			}
		}
	}
}

func TestGlobalTopkMatchesReference(t *testing.T) {
	for _, p := range []int{1, 2, 3, 4, 5, 8} {
		for _, kind := range []string{"random", "empty-one", "same", "ties"} {
			for _, red := range []collectives.ReduceOp{collectives.Sum, collectives.Avg} {
				for _, est := range []collectives.ThresholdEstimator{collectives.EstimateHistogram, collectives.EstimateReuse} {
					t.Run(fmt.Sprintf("p%d/%s/%v/%v", p, kind, red, est), func(t *testing.T) {
						rng := rand.New(rand.NewPCG(uint64(p), uint64(len(kind))))
						dim, kr := 2000, 60
						in := gtkInputs[float32](rng, p, dim, kr, kind)
						k := kr // the global K of the local selections' density
						opts := collectives.GlobalTopkOptions{K: k, Reduce: red}
						res := gtkRun(t, in, 5, collectives.GlobalTopkState{Period: 3, Estimator: est}, opts)
						if est == collectives.EstimateReuse && (!res[0].stats[0].Exact || res[1].stats[0].Exact || !res[3].stats[0].Exact) {
							t.Fatalf("exact calls: %v %v %v, want the first and fourth of period 3", res[0].stats[0].Exact, res[1].stats[0].Exact, res[3].stats[0].Exact)
						}
						gtkCheck(t, in, k, red, res)
					})
				}
			}
		}
	}
}

func TestGlobalTopkFloat64DenseOutAndExtremes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, tc := range []struct {
		name     string
		dim, kr  int
		k        int
		denseOut bool
	}{
		{"dense-out", 300, 100, 120, true},
		{"k-zero", 500, 20, 0, false},
		{"k-above-union", 500, 20, 400, false},
		{"dense-sums", 64, 60, 30, false}, // the owners' sums go dense
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := gtkInputs[float64](rng, 5, tc.dim, tc.kr, "random")
			opts := collectives.GlobalTopkOptions{K: tc.k, DenseOut: tc.denseOut}
			res := gtkRun(t, in, 3, collectives.GlobalTopkState{Period: 2, Estimator: collectives.EstimateReuse}, opts)
			gtkCheck(t, in, tc.k, collectives.Sum, res)
		})
	}
}

// With a lossy codec the result is still the same on every rank and an
// exact call keeps exactly K entries (none of the sums decode to zero at
// these magnitudes).
func TestGlobalTopkQuantizedAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	in := gtkInputs[float32](rng, 4, 3000, 80, "random")
	res := gtkRun(t, in, 2, collectives.GlobalTopkState{}, collectives.GlobalTopkOptions{K: 80, Quant: quant.FP16})
	for r := range in {
		if err := sameMap(asMap(res[0].out[r]), asMap(res[0].out[0])); err != nil {
			t.Fatalf("rank %d differs from rank 0: %v", r, err)
		}
	}
	if n := len(asMap(res[0].out[0])); n != 80 {
		t.Fatalf("exact call kept %d entries, want 80", n)
	}
}

func TestGlobalTopkEstimatorTracksK(t *testing.T) {
	// A stream of selections whose magnitudes grow 10% a call: the
	// histogram estimate keeps the kept count near K where reuse drifts.
	rng := rand.New(rand.NewPCG(5, 5))
	p, dim, k := 4, 4000, 100
	var base []*sparse.Vector[float32]
	for range p {
		v := &sparse.Vector[float32]{Dim: dim}
		for _, i := range slices.Sorted(slices.Values(rng.Perm(dim)[:200])) {
			v.Indices = append(v.Indices, uint32(i))
			v.Values = append(v.Values, float32(rng.NormFloat64()))
		}
		base = append(base, v)
	}
	errAt := func(est collectives.ThresholdEstimator) float64 {
		worst := 0.0
		coltest.Run(t, p, 20*time.Second, func(ctx context.Context, tr transport.Transport) error {
			st := collectives.GlobalTopkState{Period: 10, Estimator: est}
			in := &sparse.Vector[float32]{}
			for c := range 10 {
				in.CopyFrom(base[tr.Rank()])
				for j := range in.Values {
					in.Values[j] *= float32(math.Pow(1.1, float64(c)))
				}
				s, err := collectives.GlobalTopk(coltest.NewOp(ctx, tr, uint64(c+1), transport.Desc{}), in, &sparse.Vector[float32]{}, &sparse.Vector[float32]{}, &st, collectives.GlobalTopkOptions{K: k})
				if err != nil {
					return err
				}
				if tr.Rank() == 0 {
					worst = max(worst, math.Abs(float64(s.Kept-k))/float64(k))
				}
			}
			return nil
		})
		return worst
	}
	hist, reuse := errAt(collectives.EstimateHistogram), errAt(collectives.EstimateReuse)
	if !(hist < reuse) {
		t.Fatalf("worst relative error of the kept count: histogram %.2f, reuse %.2f; want histogram below", hist, reuse)
	}
}

// Ranks that pass different K (or reductions) fail on every rank with
// ErrMismatch, within the deadline, instead of running different
// selections.
func TestGlobalTopkMismatchedK(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	in := gtkInputs[float32](rng, 3, 500, 20, "random")
	errs := coltest.Run(t, 3, 10*time.Second, func(ctx context.Context, tr transport.Transport) error {
		k := 20
		if tr.Rank() == 2 {
			k = 21
		}
		var st collectives.GlobalTopkState
		_, err := collectives.GlobalTopk(coltest.NewOp(ctx, tr, 1, transport.Desc{}), in[tr.Rank()], &sparse.Vector[float32]{}, &sparse.Vector[float32]{}, &st, collectives.GlobalTopkOptions{K: k})
		return err
	})
	for r, err := range errs {
		// The ranks that see the mismatch fail with ErrMismatch; the
		// others learn of it from them.
		if err == nil || !strings.Contains(err.Error(), "k=20") || !strings.Contains(err.Error(), "k=21") {
			t.Fatalf("rank %d: %v, want a mismatch naming both K", r, err)
		}
	}
	if !errors.Is(errs[2], transport.ErrMismatch) && !errors.Is(errs[0], transport.ErrMismatch) {
		t.Fatalf("no rank failed with ErrMismatch: %v", errs)
	}
}

// A model of bandwidth alone makes tieQuota split the owners into groups
// (TestTieGroupSplits): the ties at the K-th magnitude are still kept by
// index across the groups, as the reference keeps them.
func TestGlobalTopkTiesInGroups(t *testing.T) {
	for _, p := range []int{5, 8, 13} {
		t.Run(fmt.Sprintf("p%d", p), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(p), 7))
			in := gtkInputs[float32](rng, p, 2000, 60, "ties")
			opts := collectives.GlobalTopkOptions{K: 60, Model: collectives.CostModel{Beta: 1e-9}}
			res := gtkRun(t, in, 2, collectives.GlobalTopkState{Period: 1}, opts)
			gtkCheck(t, in, 60, collectives.Sum, res)
		})
	}
}
