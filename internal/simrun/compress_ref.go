package simrun

import (
	"cmp"
	"math"
	"slices"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/sparse"
)

// CompressReference recomputes the Compressor's reduction locally, for
// `sparcml bench --op compress --check` (on every rank) and
// `sparcml sim --op compress --check`: a Sparsifier per rank selects from
// that rank's seeded gradient (CompressGradient), the selections are
// summed, and the scope's rule applied (union: every sum; global: the K
// largest magnitudes, ties to the lower index, on exact steps, the
// magnitudes at or above the step's threshold otherwise), each rank's
// dropped entries going back into its reference residual.
type CompressReference[T collectives.Float] struct {
	scope compress.Scope
	sps   []*compress.Sparsifier[T]
	sels  []sparse.Vector[T]
	grad  []T
	sums  []T
	want  []T
	order []int
}

// NewCompressReference is the reference of p ranks compressing n entries.
func NewCompressReference[T collectives.Float](p, n int, cfg compress.Config, scope compress.Scope) (*CompressReference[T], error) {
	r := &CompressReference[T]{scope: scope, sps: make([]*compress.Sparsifier[T], p), sels: make([]sparse.Vector[T], p),
		grad: make([]T, n), sums: make([]T, n), want: make([]T, n)}
	for q := range r.sps {
		var err error
		if r.sps[q], err = compress.NewSparsifier[T](n, cfg); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Step advances the reference by one step of every rank's gradient; g is
// the global scope's statistics of that step on any rank (its threshold
// and whether it was exact), unused for the union.
func (r *CompressReference[T]) Step(seed uint64, step int, g collectives.GlobalTopkStats) error {
	p := len(r.sps)
	clear(r.sums)
	k := 0
	for q := range p {
		CompressGradient(r.grad, seed, step, q)
		info, err := r.sps[q].Step(r.grad, &r.sels[q])
		if err != nil {
			return err
		}
		k = info.K
		for j, i := range r.sels[q].Indices {
			r.sums[i] += r.sels[q].Values[j]
		}
	}
	clear(r.want)
	for _, i := range r.keep(k, g) {
		r.want[i] = r.sums[i] / T(p)
	}
	if r.scope == compress.ScopeGlobal {
		r.restoreDropped()
	}
	return nil
}

// Want is the result every rank should hold after the last Step, dense.
func (r *CompressReference[T]) Want() []T { return r.want }

// Residual is rank's error-feedback residual after the last Step (nil
// without error feedback).
func (r *CompressReference[T]) Residual(rank int) []T { return r.sps[rank].Residual() }

// keep returns the indices of the sums the scope keeps: every nonzero sum
// for the union, the global rule's otherwise.
func (r *CompressReference[T]) keep(k int, g collectives.GlobalTopkStats) []int {
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
func (r *CompressReference[T]) restoreDropped() {
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

// CompressGradient is rank's gradient at a step: multiples of 1/64 in
// [-16, 16], so that sums over ranks, and residuals over many steps, are
// exact in float32 in any order, with few ties among the largest.
func CompressGradient[T collectives.Float](dst []T, seed uint64, step, rank int) {
	x := seed*0x9E3779B97F4A7C15 ^ uint64(step+1)*0xD1B54A32D192ED03 ^ uint64(rank+1)*0xBF58476D1CE4E5B9
	for i := range dst {
		x += 0x9E3779B97F4A7C15
		z := (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		z ^= z >> 31
		dst[i] = T(int(z%2049)-1024) / 64
	}
}
