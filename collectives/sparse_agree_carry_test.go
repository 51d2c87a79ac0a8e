package collectives_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/collectives/coltest"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// latencyModel is the simulator's model of a 10 Gbit/s network of 5 us
// latency (Latency known): the counts exchange goes in one round and may
// carry the scatter (sparse_agree_carry.go).
var latencyModel = collectives.CostModel{Alpha: 5e-6, Beta: 1 / 1.25e9, Gamma: 1 / 4e9, Latency: 5e-6}

// TestSparseAutoCarriedScatter: under AlgoAuto with a model that knows
// the latency, every pattern of inputs (ranks that carry their slices and
// ranks too large to, an algorithm that uses them and one that does not,
// equal and balanced ranges) sums to the reference on every rank,
// bit-identical, with the bytes PredictSparseExact computes.
func TestSparseAutoCarriedScatter(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 5))
	opts := collectives.SparseOptions{Algo: collectives.AlgoAuto, Model: latencyModel, Indices: collectives.IndexRaw}
	for _, p := range []int{3, 4, 5, 8} {
		for _, dim := range []int{64, 1000, 1 << 16} {
			for _, kind := range spKinds {
				in := spInputs[float32](rng, p, dim, kind)
				name := fmt.Sprintf("P=%d dim=%d %s", p, dim, kind)
				outs, stats, sent, _, errs := spRunCounting(t, in, opts)
				for r, err := range errs {
					if err != nil {
						t.Fatalf("%s: rank %d: %v", name, r, err)
					}
				}
				ref := spReference(in)
				for r, out := range outs {
					if err := spCheckResult(out, ref, dim); err != nil {
						t.Fatalf("%s: rank %d: %v", name, r, err)
					}
					if !spSameBits(outs[0], out) || stats[r].Algo != stats[0].Algo {
						t.Fatalf("%s: rank %d's result or algorithm differs from rank 0's", name, r)
					}
				}
				pred := collectives.PredictSparseExact(latencyModel, stats[0].Algo, in, opts, stats[0].Bounds)
				if !slices.Equal(pred.BytesSent, sent) {
					t.Fatalf("%s %v: bytes sent per rank %v, predicted %v", name, stats[0].Algo, sent, pred.BytesSent)
				}
			}
		}
	}
}

// TestSparseAutoCarriesScatter: on small uniform inputs, where auto runs
// ssar-split on equal ranges and every rank's slices are worth less than
// a latency, auto sends exactly the messages of forced ssar-split, the
// scatter's riding on the records, and bytes that exceed forced
// ssar-split's by the records alone.
func TestSparseAutoCarriesScatter(t *testing.T) {
	const p, dim = 8, 1 << 16
	rng := rand.New(rand.NewPCG(30, 6))
	in := make([]*sparse.Vector[float32], p)
	for r := range in {
		in[r] = &sparse.Vector[float32]{Dim: dim}
		for i := range dim {
			if rng.IntN(200) == 0 {
				in[r].Indices = append(in[r].Indices, uint32(i))
				in[r].Values = append(in[r].Values, float32(rng.IntN(15)-7))
			}
		}
	}
	auto := collectives.SparseOptions{Algo: collectives.AlgoAuto, Model: latencyModel, Indices: collectives.IndexRaw}
	outs, stats, sent, msgs, errs := spRunCounting(t, in, auto)
	forced := auto
	forced.Algo = collectives.AlgoSSARSplitAllgather
	_, _, forcedSent, forcedMsgs, forcedErrs := spRunCounting(t, in, forced)
	ref := spReference(in)
	for r := range p {
		if errs[r] != nil || forcedErrs[r] != nil {
			t.Fatalf("rank %d: %v, forced %v", r, errs[r], forcedErrs[r])
		}
		if err := spCheckResult(outs[r], ref, dim); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if stats[0].Algo != collectives.AlgoSSARSplitAllgather || !slices.Equal(stats[0].Bounds, forcedBounds(dim, p)) {
		t.Fatalf("auto ran %v on %v, want ssar-split on equal ranges", stats[0].Algo, stats[0].Bounds)
	}
	for r := range p {
		records := sent[r] - forcedSent[r]
		if msgs[r] != forcedMsgs[r] || records <= 0 || records > int64(p-1)*(48+4*128) {
			t.Errorf("rank %d: %d messages and %d bytes, forced ssar-split %d and %d", r, msgs[r], sent[r], forcedMsgs[r], forcedSent[r])
		}
	}
}

// forcedBounds are the equal ranges a forced split algorithm runs on.
func forcedBounds(dim, p int) []int {
	b := make([]int, p+1)
	for i := range b {
		b[i] = int(uint64(dim) * uint64(i) / uint64(p))
	}
	return b
}

// spRunCounting is spRun that also returns the messages each rank sent.
func spRunCounting[T collectives.Float](t testing.TB, in []*sparse.Vector[T], opts collectives.SparseOptions) ([]*sparse.Vector[T], []collectives.SparseStats, []int64, []int64, []error) {
	p := len(in)
	outs := make([]*sparse.Vector[T], p)
	stats := make([]collectives.SparseStats, p)
	sent, msgs := make([]int64, p), make([]int64, p)
	errs := coltest.Run(t, p, 20*time.Second, func(ctx context.Context, tr transport.Transport) error {
		r := tr.Rank()
		op := coltest.NewOp(ctx, tr, 7, transport.Desc{})
		before := tr.Stats()
		outs[r] = &sparse.Vector[T]{}
		var err error
		stats[r], err = collectives.SparseAllreduce(op, in[r], outs[r], opts)
		d := tr.Stats().Sub(before)
		sent[r], msgs[r] = int64(d.BytesSent), int64(d.MsgsSent)
		return err
	})
	return outs, stats, sent, msgs, errs
}
