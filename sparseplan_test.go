package sparcml

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// planInputs are every rank's seeded sparse inputs of call i, and their
// sum: small integers, so every sum is exact.
func planInputs(t *testing.T, p, dim, i int) ([]*SparseVector[float32], []float32) {
	in := make([]*SparseVector[float32], p)
	sum := make([]float32, dim)
	for r := range in {
		rng := rand.New(rand.NewPCG(uint64(i), uint64(r)))
		idx := make([]uint32, 50+rng.IntN(100)) // counts change from call to call
		vals := make([]float32, len(idx))
		for k := range idx {
			idx[k], vals[k] = uint32(rng.IntN(dim)), float32(rng.IntN(9)+1)
		}
		v, err := SparseVectorFromUnsorted(dim, idx, vals)
		require.NoError(t, err)
		in[r] = v
		for j, x := range v.ToDense(nil) {
			sum[j] += x
		}
	}
	return in, sum
}

func equalDense(got *SparseVector[float32], want []float32) error {
	for i, x := range got.ToDense(nil) {
		if x != want[i] {
			return fmt.Errorf("element %d = %v, want %v", i, x, want[i])
		}
	}
	return nil
}

// TestSparsePlanSchedule: with SPARCML_SPARSE_AGREE_EVERY=4, calls 0, 4
// and 8 of a tensor (WithTensor) exchange counts and the others reuse
// their plan, blocking and started alike (three in flight at once), every
// result the sum of that call's inputs; another tensor of the same shape
// has a schedule of its own, and an untagged call exchanges; with 1 every
// call exchanges. WithTensor(id, n) sets the interval in place of the
// variable (n = 4 under a variable of 1, n = 1 under the default 16).
func TestSparsePlanSchedule(t *testing.T) {
	const p, dim = 4, 4000
	for _, tc := range []struct {
		env, every int // the variable (0: unset) and the interval in effect
		option     bool
	}{
		{env: 4, every: 4}, {env: 1, every: 1}, {env: 1, every: 4, option: true}, {every: 1, option: true},
	} {
		every := tc.every
		t.Run(fmt.Sprintf("env=%d,every=%d", tc.env, every), func(t *testing.T) {
			if tc.env > 0 {
				t.Setenv("SPARCML_SPARSE_AGREE_EVERY", fmt.Sprint(tc.env))
			} else {
				t.Setenv("SPARCML_SPARSE_AGREE_EVERY", "")
			}
			withTensor := func(id uint64) CallOption {
				if tc.option {
					return WithTensor(id, every)
				}
				return WithTensor(id)
			}
			comms := localJob(t, p)
			const calls = 9
			inputs := make([][]*SparseVector[float32], calls)
			sums := make([][]float32, calls)
			for i := range calls {
				inputs[i], sums[i] = planInputs(t, p, dim, i)
			}
			other, otherSum := planInputs(t, p, dim, 99)
			tensor := withTensor(7)
			errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
				me := c.Rank()
				check := func(i int, st SparseStats, out *SparseVector[float32]) error {
					if exchanges := every == 1 || i%every == 0; st.Agreed != exchanges || st.Reused == exchanges {
						return fmt.Errorf("call %d: agreed %v, reused %v", i, st.Agreed, st.Reused)
					}
					if err := equalDense(out, sums[i]); err != nil {
						return fmt.Errorf("call %d (%v): %w", i, st.Algo, err)
					}
					return nil
				}
				for i := range 5 {
					out := &SparseVector[float32]{}
					st, err := SparseAllreduce(ctx, c, inputs[i][me], out, Sum, tensor)
					if err != nil {
						return fmt.Errorf("call %d: %w", i, err)
					}
					if err := check(i, st, out); err != nil {
						return err
					}
					if i == 1 || i == 2 {
						// Between them, another tensor of the same shape
						// (its own first call, then its second) and the
						// same shape untagged (an exchange every time).
						for k, opt := range []CallOption{withTensor(8), WithAlgo(AlgoAuto)} {
							o := &SparseVector[float32]{}
							st, err := SparseAllreduce(ctx, c, other[me], o, Sum, opt)
							exchanges := k == 1 || i == 1 || every == 1
							if err != nil || st.Agreed != exchanges || st.Reused == exchanges {
								return fmt.Errorf("call %d's neighbour %d: agreed %v, reused %v, err %v", i, k, st.Agreed, st.Reused, err)
							}
							if err := equalDense(o, otherSum); err != nil {
								return fmt.Errorf("call %d's neighbour %d: %w", i, k, err)
							}
						}
					}
				}
				// Calls 5, 6, 7 in flight at once (5..7 reuse call 4's
				// plan), then 8 blocking.
				var reqs []*Request
				outs := make([]*SparseVector[float32], calls)
				for i := 5; i < 8; i++ {
					outs[i] = &SparseVector[float32]{}
					reqs = append(reqs, StartSparseAllreduce(ctx, c, inputs[i][me], outs[i], Sum, tensor))
				}
				for k, r := range reqs {
					if err := r.Wait(ctx); err != nil {
						return fmt.Errorf("call %d: %w", 5+k, err)
					}
					if err := check(5+k, *r.SparseStats(), outs[5+k]); err != nil {
						return err
					}
				}
				outs[8] = &SparseVector[float32]{}
				st, err := SparseAllreduce(ctx, c, inputs[8][me], outs[8], Sum, tensor)
				if err != nil {
					return err
				}
				return check(8, st, outs[8])
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
		})
	}
}

// TestSparsePlanAfterFailedExchange: a call whose exchange fails (one
// rank's input is invalid) leaves no plan, and the calls that would have
// reused it exchange counts themselves and succeed.
func TestSparsePlanAfterFailedExchange(t *testing.T) {
	const p, dim = 3, 1000
	t.Setenv("SPARCML_SPARSE_AGREE_EVERY", "8")
	comms := localJob(t, p)
	in, sum := planInputs(t, p, dim, 1)
	bad := &SparseVector[float32]{Dim: dim, Indices: []uint32{5, 3}, Values: []float32{1, 1}} // unsorted
	errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
		me := c.Rank()
		first := in[me]
		if me == 1 {
			first = bad
		}
		_, err := SparseAllreduce(ctx, c, first, &SparseVector[float32]{}, Sum, WithTensor(1))
		if err == nil || (me == 1 && !errors.Is(err, ErrInvalid)) {
			return fmt.Errorf("call with rank 1's invalid input: err = %v, want a failure (ErrInvalid on rank 1)", err)
		}
		for i := 1; i <= 2; i++ {
			out := &SparseVector[float32]{}
			st, err := SparseAllreduce(ctx, c, in[me], out, Sum, WithTensor(1))
			if err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
			if !st.Agreed || st.Reused {
				return fmt.Errorf("call %d: agreed %v, reused %v; want an exchange of its own", i, st.Agreed, st.Reused)
			}
			if err := equalDense(out, sum); err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// WithTensor with an interval below 1, or with two, fails the call with
// ErrInvalid on every rank, and the next valid call succeeds.
func TestWithTensorInvalidInterval(t *testing.T) {
	const p, dim = 3, 1000
	comms := localJob(t, p)
	in, sum := planInputs(t, p, dim, 1)
	errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
		me := c.Rank()
		for _, opt := range []CallOption{WithTensor(1, 0), WithTensor(1, -3), WithTensor(1, 2, 2)} {
			if _, err := SparseAllreduce(ctx, c, in[me], &SparseVector[float32]{}, Sum, opt); !errors.Is(err, ErrInvalid) {
				return fmt.Errorf("invalid interval: err = %v, want ErrInvalid", err)
			}
		}
		out := &SparseVector[float32]{}
		if _, err := SparseAllreduce(ctx, c, in[me], out, Sum, WithTensor(1, 2)); err != nil {
			return err
		}
		return equalDense(out, sum)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}
