package collectives_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/collectives/coltest"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// TestSparsePlanReuse: a call that passes an earlier call's plan runs the
// same algorithm, index wire and ranges on new inputs without the counts
// exchange (it sends exactly the exchange's bytes less than a call that
// makes the same decisions afresh), and its result is the sum of the new
// inputs.
func TestSparsePlanReuse(t *testing.T) {
	const p, dim = 5, 1 << 16
	for _, tc := range []struct {
		name string
		opts collectives.SparseOptions
	}{
		{"auto", collectives.SparseOptions{Algo: collectives.AlgoAuto}},
		{"auto q4", collectives.SparseOptions{Algo: collectives.AlgoAuto, Quant: quant.Q4}},
		// A model under which AlgoAuto picks ssar-split (slow sparse
		// merges, fast network), whose balanced ranges the plan keeps.
		{"auto ssar-split", collectives.SparseOptions{Algo: collectives.AlgoAuto,
			Model: collectives.CostModel{Alpha: 1e-9, Beta: 1e-8, Gamma: 1e-9, SparseGamma: 1e-7}}},
		// A model that knows its latency (as the simulator's does):
		// the counts exchange goes in one round of P-1 messages.
		{"auto direct exchange", collectives.SparseOptions{Algo: collectives.AlgoAuto,
			Model: collectives.CostModel{Alpha: 5e-6, Beta: 1 / 1.25e9, Gamma: 1 / 4e9, Latency: 5e-6}}},
		{"ssar-split balanced", collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather, Balanced: true}},
		{"dsar balanced packed", collectives.SparseOptions{Algo: collectives.AlgoDSAR, Balanced: true, Indices: collectives.IndexPacked}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(21, 21))
			first := spInputs[float32](rng, p, dim, "1%")
			second := spInputs[float32](rng, p, dim, "1%")
			stats := make([][3]collectives.SparseStats, p)
			sent := make([][3]int64, p)
			outs := make([]*sparse.Vector[float32], p)
			errs := coltest.Run(t, p, 20*time.Second, func(ctx context.Context, tr transport.Transport) error {
				r := tr.Rank()
				outs[r] = &sparse.Vector[float32]{}
				var plan *collectives.SparsePlan
				// First call: makes the plan. Second: the same inputs
				// afresh (the exchange's bytes included). Third: new
				// inputs on the plan.
				for i, in := range []*sparse.Vector[float32]{first[r], first[r], second[r]} {
					opts := tc.opts
					if i == 2 {
						opts.Plan = plan
					}
					before := tr.Stats()
					st, err := collectives.SparseAllreduce(coltest.NewOp(ctx, tr, uint64(7+i), transport.Desc{}), in, outs[r], opts)
					if err != nil {
						return err
					}
					stats[r][i], sent[r][i] = st, int64(tr.Stats().Sub(before).BytesSent)
					if i == 0 {
						plan = st.Plan
					}
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			ref := newSpqRef(second)
			for r := range p {
				made, reused := stats[r][0], stats[r][2]
				if made.Plan == nil || !made.Agreed || made.Reused {
					t.Fatalf("rank %d: first call: plan %v, agreed %v, reused %v", r, made.Plan, made.Agreed, made.Reused)
				}
				if !reused.Reused || reused.Agreed || reused.Plan != nil {
					t.Fatalf("rank %d: call on the plan: reused %v, agreed %v, plan %v", r, reused.Reused, reused.Agreed, reused.Plan)
				}
				if reused.Algo != made.Algo || reused.PackedIndices != made.PackedIndices || !slices.Equal(reused.Bounds, made.Bounds) {
					t.Fatalf("rank %d: call on the plan ran %v packed=%v bounds %v, the plan says %v packed=%v bounds %v",
						r, reused.Algo, reused.PackedIndices, reused.Bounds, made.Algo, made.PackedIndices, made.Bounds)
				}
				if err := spqCheck(outs[r], ref, spqBounds(ref, tc.opts.Quant, reused.Algo, reused.Bounds, 0x1p-24)); err != nil {
					t.Fatalf("rank %d (ran %v): %v", r, reused.Algo, err)
				}
			}
			t.Logf("plan: %v, packed indices %v, ranges %v", stats[0][0].Algo, stats[0][0].PackedIndices, stats[0][0].Bounds)
			// Bytes: the fresh call on the first inputs sent what the model
			// says with the exchange, the call on the plan what it says for
			// the same decisions forced, with no exchange.
			fresh := stats[0][1]
			m := tc.opts.Model
			if m == (collectives.CostModel{}) {
				m = collectives.DefaultCostModel
			}
			if pred := collectives.PredictSparseExact(m, fresh.Algo, first, tc.opts, fresh.Bounds); !slices.Equal(pred.BytesSent, column(sent, 1)) {
				t.Fatalf("fresh call: bytes sent %v, predicted with the exchange %v", column(sent, 1), pred.BytesSent)
			}
			forced := tc.opts
			forced.Algo, forced.Balanced, forced.Indices = fresh.Algo, false, collectives.IndexRaw
			if fresh.PackedIndices {
				forced.Indices = collectives.IndexPacked
			}
			if pred := collectives.PredictSparseExact(m, fresh.Algo, second, forced, fresh.Bounds); !slices.Equal(pred.BytesSent, column(sent, 2)) {
				t.Fatalf("call on the plan: bytes sent %v, predicted without the exchange %v", column(sent, 2), pred.BytesSent)
			}
		})
	}
}

func column(rows [][3]int64, i int) []int64 {
	out := make([]int64, len(rows))
	for r, row := range rows {
		out[r] = row[i]
	}
	return out
}

// TestSparsePlanMismatch: a plan passed to a call it was not made for
// (another dimension) fails that call on every rank with ErrInvalid,
// instead of running ranges of the wrong vector.
func TestSparsePlanMismatch(t *testing.T) {
	const p = 3
	rng := rand.New(rand.NewPCG(22, 22))
	in := spInputs[float32](rng, p, 1000, "1%")
	other := spInputs[float32](rng, p, 2000, "1%")
	errs := coltest.Run(t, p, 20*time.Second, func(ctx context.Context, tr transport.Transport) error {
		r := tr.Rank()
		st, err := collectives.SparseAllreduce(coltest.NewOp(ctx, tr, 7, transport.Desc{}), in[r], &sparse.Vector[float32]{},
			collectives.SparseOptions{Algo: collectives.AlgoAuto})
		if err != nil {
			return err
		}
		_, err = collectives.SparseAllreduce(coltest.NewOp(ctx, tr, 8, transport.Desc{}), other[r], &sparse.Vector[float32]{},
			collectives.SparseOptions{Algo: collectives.AlgoAuto, Plan: st.Plan})
		return err
	})
	for r, err := range errs {
		if !errors.Is(err, transport.ErrInvalid) {
			t.Fatalf("rank %d: err = %v, want ErrInvalid", r, err)
		}
	}
}
