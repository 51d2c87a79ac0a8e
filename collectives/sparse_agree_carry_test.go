package collectives_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/sparse"
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
	_, forcedStats, forcedSent, forcedMsgs, forcedErrs := spRunCounting(t, in, forced)
	ref := spReference(in)
	for r := range p {
		if errs[r] != nil || forcedErrs[r] != nil {
			t.Fatalf("rank %d: %v, forced %v", r, errs[r], forcedErrs[r])
		}
		if err := spCheckResult(outs[r], ref, dim); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if stats[0].Algo != collectives.AlgoSSARSplitAllgather || !slices.Equal(stats[0].Bounds, forcedStats[0].Bounds) {
		t.Fatalf("auto ran %v on %v, want ssar-split on equal ranges", stats[0].Algo, stats[0].Bounds)
	}
	for r := range p {
		records := sent[r] - forcedSent[r]
		if msgs[r] != forcedMsgs[r] || records <= 0 || records > int64(p-1)*(48+4*128) {
			t.Errorf("rank %d: %d messages and %d bytes, forced ssar-split %d and %d", r, msgs[r], sent[r], forcedMsgs[r], forcedSent[r])
		}
	}
}
