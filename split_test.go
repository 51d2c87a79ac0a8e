package sparcml

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seeded is rank r's input of n elements in test number k: distinct per
// rank, so a sum over the wrong members shows.
func seeded(k, r, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64((k*131+r*17+i*7)%97) + float64(r)/8
	}
	return v
}

// sumOf is the reference: the element-wise sum of the members' inputs,
// computed here from the same seeds.
func sumOf(k int, jobRanks []int, n int) []float64 {
	out := make([]float64, n)
	for _, r := range jobRanks {
		for i, x := range seeded(k, r, n) {
			out[i] += x
		}
	}
	return out
}

// checkedCollectives runs rounds allreduces (sizes that take different
// algorithms) and an allgather of job ranks on c, each checked against
// the reference over jobRanks (the job ranks of c's ranks, in order).
func checkedCollectives(ctx context.Context, c *Comm, jobRanks []int, rounds int) error {
	me := jobRanks[c.Rank()]
	for k := 0; k < rounds; k++ {
		n := []int{1, 7, 300, 5000}[k%4]
		v := seeded(k, me, n)
		if err := Allreduce(ctx, c, v, Sum); err != nil {
			return err
		}
		want := sumOf(k, jobRanks, n)
		for i := range v {
			if math.Abs(v[i]-want[i]) > 1e-9*math.Abs(want[i])+1e-12 {
				return fmt.Errorf("job rank %d round %d: element %d is %v, want %v", me, k, i, v[i], want[i])
			}
		}
	}
	got := make([]float64, c.Size())
	if err := Allgather(ctx, c, []float64{float64(me)}, got); err != nil {
		return err
	}
	for r, j := range jobRanks {
		if got[r] != float64(j) {
			return fmt.Errorf("job rank %d: allgather gives %v, want the members %v in order", me, got, jobRanks)
		}
	}
	return nil
}

func TestSplitByColorAndKey(t *testing.T) {
	const p = 7
	comms, err := Local(p)
	require.NoError(t, err)
	defer closeAll(comms)
	// Colors 0, 1, 2 by rank mod 3; key reverses the order; rank 6
	// passes a negative color and joins none.
	subs := make([]*Comm, p)
	errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		color := c.Rank() % 3
		if c.Rank() == 6 {
			color = -1
		}
		s, err := c.Split(ctx, color, -c.Rank())
		subs[c.Rank()] = s
		return err
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Nil(t, subs[6])
	groups := map[int][]int{0: {3, 0}, 1: {4, 1}, 2: {5, 2}}
	for r := 0; r < 6; r++ {
		g := groups[r%3]
		require.Equal(t, len(g), subs[r].Size(), "rank %d", r)
		assert.Equal(t, g[subs[r].Rank()], r, "rank %d's place in its group", r)
	}
	errs = onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
		if c.Rank() == 6 {
			return nil
		}
		return checkedCollectives(ctx, subs[c.Rank()], groups[c.Rank()%3], 8)
	})
	for _, err := range errs {
		assert.NoError(t, err)
	}
	for _, s := range subs {
		if s != nil {
			require.NoError(t, s.Close())
		}
	}
	// The parent is untouched by its sub-communicators' operations.
	all := []int{0, 1, 2, 3, 4, 5, 6}
	errs = onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
		return checkedCollectives(ctx, c, all, 4)
	})
	for _, err := range errs {
		assert.NoError(t, err)
	}
}

// Two splits of one job, crossing each other (rows and columns of a 2 x 4
// grid), run collectives at the same time as each other and as the
// parent; every result is the sum over its own group.
func TestSplitsRunConcurrently(t *testing.T) {
	const p = 8
	comms, err := Local(p)
	require.NoError(t, err)
	defer closeAll(comms)
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	errs := onEveryRank(t, comms, 60*time.Second, func(ctx context.Context, c *Comm) error {
		r := c.Rank()
		row, err := c.Split(ctx, r/4, r)
		if err != nil {
			return err
		}
		defer row.Close()
		col, err := c.Split(ctx, r%4, r)
		if err != nil {
			return err
		}
		defer col.Close()
		rowRanks := []int{r / 4 * 4, r/4*4 + 1, r/4*4 + 2, r/4*4 + 3}
		colRanks := []int{r % 4, r%4 + 4}
		var wg sync.WaitGroup
		var errRow, errCol, errAll error
		wg.Add(3)
		go func() { defer wg.Done(); errRow = checkedCollectives(ctx, row, rowRanks, 24) }()
		go func() { defer wg.Done(); errCol = checkedCollectives(ctx, col, colRanks, 24) }()
		go func() { defer wg.Done(); errAll = checkedCollectives(ctx, c, all, 8) }()
		wg.Wait()
		return errors.Join(errRow, errCol, errAll)
	})
	for _, err := range errs {
		assert.NoError(t, err)
	}
}

// A sub-communicator of a sub-communicator maps back to the job's ranks.
func TestSplitOfSplit(t *testing.T) {
	const p = 8
	comms, err := Local(p)
	require.NoError(t, err)
	defer closeAll(comms)
	errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
		half, err := c.Split(ctx, c.Rank()%2, 0) // evens, odds
		if err != nil {
			return err
		}
		quarter, err := half.Split(ctx, half.Rank()/2, 0)
		if err != nil {
			return err
		}
		r := c.Rank()
		var ranks []int
		for j := 0; j < p; j++ {
			if j%2 == r%2 && (j/2)/2 == (r/2)/2 {
				ranks = append(ranks, j)
			}
		}
		return checkedCollectives(ctx, quarter, ranks, 8)
	})
	for _, err := range errs {
		assert.NoError(t, err)
	}
}

func TestSplitInvalidKeyFailsEveryRank(t *testing.T) {
	comms, err := Local(3)
	require.NoError(t, err)
	defer closeAll(comms)
	errs := onEveryRank(t, comms, 10*time.Second, func(ctx context.Context, c *Comm) error {
		key := 0
		if c.Rank() == 1 {
			key = math.MaxInt32 + 1
		}
		_, err := c.Split(ctx, 0, key)
		return err
	})
	for r, err := range errs {
		require.ErrorIs(t, err, ErrInvalid, "rank %d", r)
		assert.Contains(t, err.Error(), "rank 1 passed", "rank %d", r)
	}
}
