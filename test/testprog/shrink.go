package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/sparcml/sparcml"
)

// survive runs checked allreduces until a rank dies: rank seed mod size
// kills itself with SIGKILL at operation (seed / size) mod 7 + 1. Each
// survivor's error must name it; the survivors shrink and run 100 more
// allreduces, each checked against the sum over the survivors' seeded
// inputs. Run under SPARCML_ON_PEER_LOSS=revoke and sparcml run
// --keep-going.
func survive(ctx context.Context, c *sparcml.Comm, seed uint64) error {
	victim := int(seed % uint64(c.Size()))
	dieAt := int(seed/uint64(c.Size()))%7 + 1
	var err error
	for k := 0; err == nil; k++ {
		if c.Rank() == victim && k == dieAt {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		err = checkedSum(ctx, c, k, everyRank(c.Size()))
	}
	var wrong *wrongResult
	if errors.As(err, &wrong) {
		return err
	}
	failed := c.FailedRanks(err)
	if len(failed) != 1 || failed[0] != victim {
		return fmt.Errorf("rank %d: FailedRanks %v, want [%d], of: %w", c.Rank(), failed, victim, err)
	}
	fmt.Printf("rank %d: lost rank %d: %v\n", c.Rank(), victim, err)
	s, err := c.Shrink(ctx, failed)
	if err != nil {
		return err
	}
	defer s.Close()
	var members []int // the survivors' ranks in c, in their new order
	for r := 0; r < c.Size(); r++ {
		if r != victim {
			members = append(members, r)
		}
	}
	for k := 0; k < 100; k++ {
		if err := checkedSum(ctx, s, 1000+k, members); err != nil {
			return err
		}
	}
	fmt.Printf("rank %d: now rank %d of %d: 100 checked allreduces\n", c.Rank(), s.Rank(), s.Size())
	return nil
}

func everyRank(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// checkedSum allreduces a vector seeded by (k, original rank) over c,
// whose ranks are the original ranks members, and checks every element
// against the sum computed here.
func checkedSum(ctx context.Context, c *sparcml.Comm, k int, members []int) error {
	const n = 4096
	in := func(r, i int) float64 { return float64((k*31+r*7+i)%101) + float64(r)/4 }
	me := members[c.Rank()]
	v := make([]float64, n)
	for i := range v {
		v[i] = in(me, i)
	}
	if err := sparcml.Allreduce(ctx, c, v, sparcml.Sum); err != nil {
		return err
	}
	for i := range v {
		var want float64
		for _, r := range members {
			want += in(r, i)
		}
		if v[i] != want {
			return &wrongResult{fmt.Sprintf("rank %d op %d: element %d is %v, want %v", me, k, i, v[i], want)}
		}
	}
	return nil
}
