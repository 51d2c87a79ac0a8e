package main

import (
	"cmp"
	"context"
	"math"
	"slices"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/compress"
)

// compressReference recomputes `--op compress` locally, on every rank: a
// Sparsifier per rank selects from that rank's seeded gradient, the
// selections are summed, and the scope's rule applied (union: every sum;
// global: the K largest magnitudes, ties to the lower index, on exact
// steps, the magnitudes at or above the step's threshold otherwise), each
// rank's dropped entries going back into its reference residual.
type compressReference[T sparcml.Float] struct {
	scope compress.Scope
	sps   []*compress.Sparsifier[T]
	sels  []sparcml.SparseVector[T]
	grad  []T
	sums  []T
	want  []T
	order []int
}

func newCompressReference[T sparcml.Float](p, n int, zc sparcml.CompressorConfig) (*compressReference[T], error) {
	r := &compressReference[T]{scope: zc.Scope, sps: make([]*compress.Sparsifier[T], p), sels: make([]sparcml.SparseVector[T], p),
		grad: make([]T, n), sums: make([]T, n), want: make([]T, n)}
	for q := range r.sps {
		var err error
		if r.sps[q], err = compress.NewSparsifier[T](n, zc.Sparsify); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// check advances the reference by one step and returns the number of
// elements of this rank's result and residual that differ from it.
func (r *compressReference[T]) check(_ context.Context, c *sparcml.Comm, cfg *benchConfig, step int, st sparcml.CompressStats, got, residual []T) (int64, error) {
	p := len(r.sps)
	clear(r.sums)
	k := 0
	for q := range p {
		compressGradient(r.grad, cfg.seed, step, q)
		info, err := r.sps[q].Step(r.grad, &r.sels[q])
		if err != nil {
			return 0, err
		}
		k = info.K
		for j, i := range r.sels[q].Indices {
			r.sums[i] += r.sels[q].Values[j]
		}
	}
	clear(r.want)
	kept := r.keep(k, st.Global)
	for _, i := range kept {
		r.want[i] = r.sums[i] / T(p)
	}
	if r.scope == compress.ScopeGlobal {
		r.restoreDropped()
	}
	wrong := countWrong(got, r.want, 0, cfg.injectWrong)
	if res := r.sps[c.Rank()].Residual(); res != nil {
		wrong += countWrong(residual, res, 0, 0)
	}
	return wrong, nil
}

// keep returns the indices of the sums the scope keeps: every nonzero sum
// for the union, the global rule's otherwise.
func (r *compressReference[T]) keep(k int, g sparcml.GlobalTopkStats) []int {
	r.order = r.order[:0]
	for i, s := range r.sums {
		if s != 0 {
			r.order = append(r.order, i)
		}
	}
	if r.scope == compress.ScopeUnion {
		return r.order
	}
	mag := func(i int) float64 { return math.Abs(float64(r.sums[i])) }
	if !g.Exact {
		kept := r.order[:0]
		for _, i := range r.order {
			if mag(i) >= g.Threshold {
				kept = append(kept, i)
			}
		}
		return kept
	}
	slices.SortFunc(r.order, func(a, b int) int {
		if c := cmp.Compare(mag(b), mag(a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return r.order[:min(k, len(r.order))]
}

// restoreDropped puts back into every reference residual the entries its
// rank selected that the result does not hold (want is zero there).
func (r *compressReference[T]) restoreDropped() {
	for q := range r.sps {
		sel := &r.sels[q]
		for j, i := range sel.Indices {
			if r.want[i] != 0 {
				sel.Values[j] = 0
			}
		}
		_ = r.sps[q].Restore(sel) // dimensions match by construction
	}
}
