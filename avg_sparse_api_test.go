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

// localJob starts a local job of p ranks, closed when the test ends.
func localJob(t *testing.T, p int) []*Comm {
	t.Helper()
	comms, err := Local(p)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// apiInput is rank r's seeded input: small integers, so every sum is
// exact and the average is the exact sum divided once.
func apiInput(seed uint64, r, n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.IntN(19) - 9)
	}
	return x
}

// apiAverage is the reference: the sum of every rank's input over p.
func apiAverage(seed uint64, p, n int) []float32 {
	want := make([]float32, n)
	for r := range p {
		for i, v := range apiInput(seed, r, n) {
			want[i] += v
		}
	}
	for i := range want {
		want[i] /= float32(p)
	}
	return want
}

// TestAvgEveryCollective: Allreduce (every algorithm, and under WithQuant
// with fp16, which holds these integers and their sums exactly),
// StartAllreduce and ReduceScatter average, for several P including
// non-powers of two.
func TestAvgEveryCollective(t *testing.T) {
	const n = 1001
	for _, p := range []int{1, 2, 3, 5, 6} {
		comms := localJob(t, p)
		seed := uint64(p)
		want := apiAverage(seed, p, n)
		wantRS := apiAverage(seed, p, p*7)
		errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
			r := c.Rank()
			for _, opts := range [][]CallOption{
				{WithAlgo(AlgoRing)}, {WithAlgo(AlgoRabenseifner)}, {WithAlgo(AlgoRecursiveDoubling)}, nil, {WithQuant(QuantFP16)},
			} {
				data := apiInput(seed, r, n)
				if err := Allreduce(ctx, c, data, Avg, opts...); err != nil {
					return err
				}
				if err := sameAs(data, want); err != nil {
					return fmt.Errorf("allreduce %d options: %w", len(opts), err)
				}
			}
			data := apiInput(seed, r, n)
			if err := StartAllreduce(ctx, c, data, Avg).Wait(ctx); err != nil {
				return err
			}
			if err := sameAs(data, want); err != nil {
				return fmt.Errorf("start allreduce: %w", err)
			}
			out := make([]float32, 7)
			if err := ReduceScatter(ctx, c, apiInput(seed, r, p*7), out, Avg); err != nil {
				return err
			}
			if err := sameAs(out, wantRS[r*7:(r+1)*7]); err != nil {
				return fmt.Errorf("reduce-scatter: %w", err)
			}
			return nil
		})
		for r, err := range errs {
			require.NoError(t, err, "P=%d rank %d", p, r)
		}
	}
}

func sameAs(got, want []float32) error {
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("element %d = %v, want %v", i, got[i], want[i])
		}
	}
	return nil
}

// TestSparseAllreduceAvgAPI: the sparse allreduce averages with every
// algorithm and reports the algorithm that ran, never AlgoAuto, also on
// one rank and through StartSparseAllreduce.
func TestSparseAllreduceAvgAPI(t *testing.T) {
	const dim = 5000
	for _, p := range []int{1, 3, 4} {
		comms := localJob(t, p)
		inputs := make([]*SparseVector[float64], p)
		want := make([]float64, dim)
		rng := rand.New(rand.NewPCG(uint64(p), 1))
		for r := range inputs {
			idx := make([]uint32, 0, 100)
			vals := make([]float64, 0, 100)
			for range 100 {
				idx = append(idx, uint32(rng.IntN(dim)))
				vals = append(vals, float64(rng.IntN(9)+1))
			}
			v, err := SparseVectorFromUnsorted(dim, idx, vals)
			require.NoError(t, err)
			inputs[r] = v
			for i, x := range v.ToDense(nil) {
				want[i] += x
			}
		}
		for i := range want {
			want[i] /= float64(p)
		}
		errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
			for _, algo := range []Algo{AlgoAuto, AlgoSSARRecursiveDoubling, AlgoSSARSplitAllgather, AlgoDSAR, AlgoSparseAllgather, AlgoRing} {
				out := &SparseVector[float64]{}
				st, err := SparseAllreduce(ctx, c, inputs[c.Rank()], out, Avg, WithAlgo(algo))
				if err != nil {
					return err
				}
				if st.Algo == AlgoAuto || (algo != AlgoAuto && st.Algo != algo) {
					return fmt.Errorf("%v: SparseStats.Algo = %v", algo, st.Algo)
				}
				for i, x := range out.ToDense(nil) {
					if x != want[i] {
						return fmt.Errorf("%v: element %d = %v, want %v", algo, i, x, want[i])
					}
				}
			}
			out := &SparseVector[float64]{}
			req := StartSparseAllreduce(ctx, c, inputs[c.Rank()], out, Avg)
			if err := req.Wait(ctx); err != nil {
				return err
			}
			if a := req.SparseStats().Algo; a == AlgoAuto || req.Algo() != a {
				return fmt.Errorf("request: Algo %v, SparseStats.Algo %v", req.Algo(), a)
			}
			return nil
		})
		for r, err := range errs {
			require.NoError(t, err, "P=%d rank %d", p, r)
		}
	}
}

// TestSparseAllgatherForms: SparseAllgather and StartSparseAllgather take
// the same out, one vector per rank, reusing given vectors and
// allocating nil ones; a wrong length fails on every rank.
func TestSparseAllgatherForms(t *testing.T) {
	const p = 3
	comms := localJob(t, p)
	in := func(r int) *SparseVector[float32] {
		v, err := NewSparseVector(10, []uint32{uint32(r), 9}, []float32{float32(r + 1), 1})
		require.NoError(t, err)
		return v
	}
	inputs := []*SparseVector[float32]{in(0), in(1), in(2)}
	kept := &SparseVector[float32]{}
	errs := onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		outs := [][]*SparseVector[float32]{make([]*SparseVector[float32], p), make([]*SparseVector[float32], p)}
		if c.Rank() == 0 {
			outs[0][1] = kept
		}
		if err := SparseAllgather(ctx, c, inputs[c.Rank()], outs[0]); err != nil {
			return err
		}
		if err := StartSparseAllgather(ctx, c, inputs[c.Rank()], outs[1]).Wait(ctx); err != nil {
			return err
		}
		for _, out := range outs {
			for q, v := range out {
				if err := sameAs(v.ToDense(nil), inputs[q].ToDense(nil)); err != nil {
					return fmt.Errorf("vector of rank %d: %w", q, err)
				}
			}
		}
		if c.Rank() == 0 && outs[0][1] != kept {
			return errors.New("a given vector was replaced instead of reused")
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	errs = onEveryRank(t, comms, 20*time.Second, func(ctx context.Context, c *Comm) error {
		n := p
		if c.Rank() == 1 {
			n = p - 1
		}
		return SparseAllgather(ctx, c, inputs[c.Rank()], make([]*SparseVector[float32], n))
	})
	for r, err := range errs {
		if r == 1 {
			require.ErrorIs(t, err, ErrInvalid)
		} else {
			require.ErrorIs(t, err, ErrAborted, "rank %d: failed by rank 1", r)
		}
		require.ErrorContains(t, err, "len(out) = 2", "rank %d names the bad length", r)
	}
}

// TestSparseVectorConstructors: the root package's constructors build
// valid vectors and refuse invalid input.
func TestSparseVectorConstructors(t *testing.T) {
	v, err := NewSparseVector(8, []uint32{1, 5}, []float32{2, 3})
	require.NoError(t, err)
	require.Equal(t, []float32{0, 2, 0, 0, 0, 3, 0, 0}, v.ToDense(nil))
	_, err = NewSparseVector(8, []uint32{5, 1}, []float32{2, 3})
	require.Error(t, err, "unsorted indices")
	_, err = NewSparseVector(4, []uint32{4}, []float32{1})
	require.Error(t, err, "index out of range")

	u, err := SparseVectorFromUnsorted(8, []uint32{5, 1, 5}, []float32{3, 2, 1})
	require.NoError(t, err)
	require.Equal(t, []uint32{1, 5}, u.Indices)
	require.Equal(t, []float32{2, 4}, u.Values)
	_, err = SparseVectorFromUnsorted(4, []uint32{9}, []float32{1})
	require.Error(t, err)

	d := SparseVectorFromDense([]float64{0, 1.5, 0, -2})
	require.Equal(t, []uint32{1, 3}, d.Indices)
	require.Equal(t, 2, d.NNZ())

	vals := []float32{1, 0, 3}
	dv := DenseSparseVector(vals)
	require.True(t, dv.Dense)
	require.Equal(t, 3, dv.NNZ())
	require.NoError(t, dv.Validate())
	vals[1] = 7
	require.Equal(t, float32(7), dv.Values[1], "uses values, not a copy")
}
