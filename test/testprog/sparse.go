package main

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/sparcml/sparcml"
)

// sparseAlgos are every sparse allreduce algorithm and the model's choice.
var sparseAlgos = []sparcml.Algo{sparcml.AlgoAuto, sparcml.AlgoSSARRecursiveDoubling,
	sparcml.AlgoSSARSplitAllgather, sparcml.AlgoDSAR, sparcml.AlgoSparseAllgather}

// sparseInput is rank's seeded sparse vector: each index present with
// probability density, small integer values (exact sums).
func sparseInput[T sparcml.Float](seed uint64, id, rank, dim int, density float64) *sparcml.SparseVector[T] {
	r := rand.New(rand.NewPCG(seed, uint64(id)<<20|uint64(rank)))
	v := &sparcml.SparseVector[T]{Dim: dim}
	for i := 0; i < dim; i++ {
		if r.Float64() < density {
			v.Indices = append(v.Indices, uint32(i))
			v.Values = append(v.Values, T(r.IntN(9)-4))
		}
	}
	return v
}

// allSparse runs SparseAllreduce with every algorithm, balanced and equal
// ranges, at several densities (including none), summing or averaging
// (alternately), and SparseAllgather, checking each result against the
// dense sum (or average) of every rank's input.
func allSparse(ctx context.Context, c *sparcml.Comm, seed uint64) error {
	if err := sparseOf[float32](ctx, c, seed); err != nil {
		return err
	}
	return sparseOf[float64](ctx, c, seed+7)
}

func sparseOf[T sparcml.Float](ctx context.Context, c *sparcml.Comm, seed uint64) error {
	p, me := c.Size(), c.Rank()
	id := 0
	for _, dim := range []int{1, 1000, 50_000} {
		for _, density := range []float64{0, 0.01, 0.3, 1} {
			for _, algo := range sparseAlgos {
				for _, balanced := range []bool{false, true} {
					id++
					red := []sparcml.ReduceOp{sparcml.Sum, sparcml.Avg}[id%2]
					want := make([]T, dim)
					for r := 0; r < p; r++ {
						v := sparseInput[T](seed, id, r, dim, density)
						for i, x := range v.Indices {
							want[x] += v.Values[i]
						}
					}
					finish(want, red, p)
					in := sparseInput[T](seed, id, me, dim, density)
					out := &sparcml.SparseVector[T]{}
					opts := []sparcml.CallOption{sparcml.WithAlgo(algo)}
					if balanced {
						opts = append(opts, sparcml.WithBalancedRanges())
					}
					st, err := sparcml.SparseAllreduce(ctx, c, in, out, red, opts...)
					if err != nil {
						return err
					}
					if st.Algo == sparcml.AlgoAuto {
						return &wrongResult{fmt.Sprintf("sparse allreduce %v: SparseStats.Algo is %v, not the algorithm that ran", algo, st.Algo)}
					}
					what := fmt.Sprintf("sparse allreduce %v %v balanced=%v density %g", algo, red, balanced, density)
					if err := mismatch(what, dim, me, out.ToDense(nil), want); err != nil {
						return err
					}
				}
			}
			id++
			in := sparseInput[T](seed, id, me, dim, density)
			got := make([]*sparcml.SparseVector[T], p)
			if err := sparcml.SparseAllgather(ctx, c, in, got); err != nil {
				return err
			}
			for r := 0; r < p; r++ {
				want := sparseInput[T](seed, id, r, dim, density).ToDense(nil)
				if err := mismatch("sparse allgather", dim, me, got[r].ToDense(nil), want); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
