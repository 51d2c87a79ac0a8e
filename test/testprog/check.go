package main

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/sparcml/sparcml"
)

// seeded fills dst with rank's input for case id: small integers so sums
// are exact whatever the order of reduction.
func seeded[T sparcml.Float](dst []T, seed uint64, id, rank int) {
	r := rand.New(rand.NewPCG(seed, uint64(id)<<20|uint64(rank)))
	for i := range dst {
		dst[i] = T(r.IntN(17) - 8)
	}
}

func reduce[T sparcml.Float](a, b T, red sparcml.ReduceOp) T {
	switch red {
	case sparcml.Min:
		return min(a, b)
	case sparcml.Max:
		return max(a, b)
	}
	return a + b
}

// lengths are the vector lengths every case is run with: the edge cases
// and random sizes, the same on every rank (same seed).
func lengths(seed uint64, p int) []int {
	r := rand.New(rand.NewPCG(seed, 99))
	return []int{0, 1, 2, p - 1, p + 1, 3*p + 2, 1 + r.IntN(5000), 20000 + r.IntN(80000)}
}

var algos = []sparcml.Algo{sparcml.AlgoAuto, sparcml.AlgoRing, sparcml.AlgoRabenseifner, sparcml.AlgoRecursiveDoubling}
var reductions = []sparcml.ReduceOp{sparcml.Sum, sparcml.Min, sparcml.Max, sparcml.Avg}

// finish completes a reference reduction of p ranks: Avg divides the sum.
func finish[T sparcml.Float](want []T, red sparcml.ReduceOp, p int) {
	if red == sparcml.Avg {
		for i := range want {
			want[i] /= T(p)
		}
	}
}

func allCollectives(ctx context.Context, c *sparcml.Comm, seed uint64) error {
	if err := collectivesOf[float32](ctx, c, seed); err != nil {
		return err
	}
	return collectivesOf[float64](ctx, c, seed+1000)
}

func collectivesOf[T sparcml.Float](ctx context.Context, c *sparcml.Comm, seed uint64) error {
	p, me := c.Size(), c.Rank()
	id := 0
	for _, n := range lengths(seed, p) {
		for _, algo := range algos {
			for _, red := range reductions {
				id++
				if err := checkAllreduce[T](ctx, c, seed, id, n, algo, red); err != nil {
					return err
				}
			}
		}
		for _, red := range []sparcml.ReduceOp{sparcml.Sum, sparcml.Avg} {
			id++
			if err := checkReduceScatter[T](ctx, c, seed, id, n/max(p, 1), red); err != nil {
				return err
			}
		}
		id++
		if err := checkAllgather[T](ctx, c, seed, id, n/max(p, 1)); err != nil {
			return err
		}
		id++
		if err := checkAllgatherv[T](ctx, c, seed, id, n); err != nil {
			return err
		}
		for root := 0; root < p; root++ {
			id++
			if err := checkBroadcast[T](ctx, c, seed, id, n, root); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
	}
	_ = me
	return nil
}

func mismatch[T sparcml.Float](what string, n, rank int, got, want []T) error {
	for i := range want {
		if got[i] != want[i] {
			return &wrongResult{fmt.Sprintf("%s n=%d: rank %d element %d = %v, want %v", what, n, rank, i, got[i], want[i])}
		}
	}
	return nil
}

func checkAllreduce[T sparcml.Float](ctx context.Context, c *sparcml.Comm, seed uint64, id, n int, algo sparcml.Algo, red sparcml.ReduceOp) error {
	p := c.Size()
	data := make([]T, n)
	seeded(data, seed, id, c.Rank())
	want := make([]T, n)
	tmp := make([]T, n)
	seeded(want, seed, id, 0)
	for r := 1; r < p; r++ {
		seeded(tmp, seed, id, r)
		for i := range want {
			want[i] = reduce(want[i], tmp[i], red)
		}
	}
	finish(want, red, p)
	if err := sparcml.Allreduce(ctx, c, data, red, sparcml.WithAlgo(algo)); err != nil {
		return err
	}
	return mismatch(fmt.Sprintf("allreduce %s %s", algo, red), n, c.Rank(), data, want)
}

func checkReduceScatter[T sparcml.Float](ctx context.Context, c *sparcml.Comm, seed uint64, id, m int, red sparcml.ReduceOp) error {
	p, me := c.Size(), c.Rank()
	in := make([]T, m*p)
	seeded(in, seed, id, me)
	want := make([]T, m*p)
	tmp := make([]T, m*p)
	for r := 0; r < p; r++ {
		seeded(tmp, seed, id, r)
		for i := range want {
			want[i] += tmp[i]
		}
	}
	finish(want, red, p)
	out := make([]T, m)
	if err := sparcml.ReduceScatter(ctx, c, in, out, red); err != nil {
		return err
	}
	return mismatch("reduce-scatter "+red.String(), m*p, me, out, want[me*m:(me+1)*m])
}

func checkAllgather[T sparcml.Float](ctx context.Context, c *sparcml.Comm, seed uint64, id, m int) error {
	p, me := c.Size(), c.Rank()
	in := make([]T, m)
	seeded(in, seed, id, me)
	want := make([]T, m*p)
	for r := 0; r < p; r++ {
		seeded(want[r*m:(r+1)*m], seed, id, r)
	}
	out := make([]T, m*p)
	if err := sparcml.Allgather(ctx, c, in, out); err != nil {
		return err
	}
	return mismatch("allgather", m*p, me, out, want)
}

func checkAllgatherv[T sparcml.Float](ctx context.Context, c *sparcml.Comm, seed uint64, id, n int) error {
	p, me := c.Size(), c.Rank()
	r := rand.New(rand.NewPCG(seed, uint64(id)))
	counts := make([]int, p)
	total := 0
	for i := range counts {
		if r.IntN(4) > 0 { // some ranks contribute nothing
			counts[i] = r.IntN(n/p + 2)
		}
		total += counts[i]
	}
	in := make([]T, counts[me])
	seeded(in, seed, id, me)
	want := make([]T, 0, total)
	for q := 0; q < p; q++ {
		part := make([]T, counts[q])
		seeded(part, seed, id, q)
		want = append(want, part...)
	}
	out := make([]T, total)
	if err := sparcml.Allgatherv(ctx, c, in, out, counts); err != nil {
		return err
	}
	return mismatch("allgatherv", total, me, out, want)
}

func checkBroadcast[T sparcml.Float](ctx context.Context, c *sparcml.Comm, seed uint64, id, n, root int) error {
	data := make([]T, n)
	seeded(data, seed, id, c.Rank())
	want := make([]T, n)
	seeded(want, seed, id, root)
	if err := sparcml.Broadcast(ctx, c, data, root); err != nil {
		return err
	}
	return mismatch(fmt.Sprintf("broadcast root %d", root), n, c.Rank(), data, want)
}
