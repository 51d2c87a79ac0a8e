package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sparcml/sparcml"
)

// mixedLoop is the fault-injection suite's workload: until an operation
// fails, a dense allreduce, a sparse allreduce and two non-blocking
// allreduces in flight at once, each result checked (small integers, so
// the sums are exact). It prints "iter N" every 10 rounds.
func mixedLoop(ctx context.Context, c *sparcml.Comm, seed uint64) error {
	p := c.Size()
	dense := make([]float32, 16<<10)
	a, b := make([]float64, 4096), make([]float64, 100)
	for i := 0; ; i++ {
		for j := range dense {
			dense[j] = float32((c.Rank() + j + i) % 5)
		}
		if err := sparcml.Allreduce(ctx, c, dense, sparcml.Sum); err != nil {
			return err
		}
		for j, x := range dense {
			want := 0
			for r := 0; r < p; r++ {
				want += (r + j + i) % 5
			}
			if x != float32(want) {
				return &wrongResult{fmt.Sprintf("iteration %d: dense element %d is %v, want %d", i, j, x, want)}
			}
		}
		const dim = 20_000
		in := sparseInput[float32](seed, i, c.Rank(), dim, 0.01)
		out := &sparcml.SparseVector[float32]{}
		if _, err := sparcml.SparseAllreduce(ctx, c, in, out, sparcml.Sum, sparcml.WithDenseOutput()); err != nil {
			return err
		}
		want := make([]float32, dim)
		for r := 0; r < p; r++ {
			v := sparseInput[float32](seed, i, r, dim, 0.01)
			for k, x := range v.Indices {
				want[x] += v.Values[k]
			}
		}
		got := make([]float32, dim)
		if out.Dense {
			copy(got, out.Values)
		} else {
			for k, x := range out.Indices {
				got[x] = out.Values[k]
			}
		}
		for k := range want {
			if got[k] != want[k] {
				return &wrongResult{fmt.Sprintf("iteration %d: sparse element %d is %v, want %v", i, k, got[k], want[k])}
			}
		}
		for j := range a {
			a[j] = float64(c.Rank() + 1)
		}
		for j := range b {
			b[j] = float64(c.Rank() * j)
		}
		ra := sparcml.StartAllreduce(ctx, c, a, sparcml.Sum)
		rb := sparcml.StartAllreduce(ctx, c, b, sparcml.Max)
		if err := sparcml.WaitAll(ctx, ra, rb); err != nil {
			return err
		}
		if a[0] != float64(p*(p+1)/2) || b[len(b)-1] != float64((p-1)*(len(b)-1)) {
			return &wrongResult{fmt.Sprintf("iteration %d: non-blocking sums %v, %v", i, a[0], b[len(b)-1])}
		}
		if i%10 == 0 {
			fmt.Printf("iter %d\n", i)
		}
		if i > 1_000_000 {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}
