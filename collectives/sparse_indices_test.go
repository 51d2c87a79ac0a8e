package collectives_test

import (
	"math/rand/v2"
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
)

// Two measured networks for the index wire's choice: 1 Gbit/s, where a
// byte costs 8 ns and packing an index (a few ns) saves about 3 of them,
// and 200 Gbit/s, where the bytes saved are worth less than the packing.
var (
	slowNet = collectives.CostModel{Alpha: 50e-6, Beta: 1 / 125e6, Gamma: 1 / 4e9, IndexCodec: 4e-9}
	fastNet = collectives.CostModel{Alpha: 2e-6, Beta: 1 / 25e9, Gamma: 1 / 4e9, IndexCodec: 4e-9}
)

var spExactAlgos = []collectives.Algo{collectives.AlgoSSARRecursiveDoubling, collectives.AlgoSSARSplitAllgather,
	collectives.AlgoDSAR, collectives.AlgoSparseAllgather}

// TestChooseSparseIndices: on the slow network the model packs the
// indices of every sparse algorithm at 0.1% and 1% per rank, on the fast
// one it keeps them raw; and a slower index codec makes it keep them raw
// on the slow network too.
func TestChooseSparseIndices(t *testing.T) {
	const p, dim = 8, 1 << 24
	for _, frac := range []float64{0.001, 0.01} {
		nnz := sparseModelCounts(p, dim, frac, 1)
		for _, a := range spExactAlgos {
			if got := slowNet.ChooseSparseIndices(a, p, dim, 4, nnz); got != collectives.IndexPacked {
				t.Errorf("%v at %g on 1 Gbit/s: %v, want packed", a, frac, got)
			}
			if got := fastNet.ChooseSparseIndices(a, p, dim, 4, nnz); got != collectives.IndexRaw {
				t.Errorf("%v at %g on 200 Gbit/s: %v, want raw", a, frac, got)
			}
			slowCodec := slowNet
			slowCodec.IndexCodec = 1e-7 // 100 ns an index: more than 3 bytes at 8 ns
			if got := slowCodec.ChooseSparseIndices(a, p, dim, 4, nnz); got != collectives.IndexRaw {
				t.Errorf("%v at %g on 1 Gbit/s with a 100 ns codec: %v, want raw", a, frac, got)
			}
		}
	}
}

// TestSparseAllreduceIndexAuto: SparseAllreduce under IndexAuto does what
// the model says (packed on the slow network, raw on the fast one) on
// every rank, sums exactly, and packing sends fewer bytes than raw.
func TestSparseAllreduceIndexAuto(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const p, dim = 4, 1 << 16
	in := make([]*sparse.Vector[float32], p)
	for r := range in {
		in[r] = spUniformInput(rng, dim, 0.01)
	}
	ref := spReference(in)
	for _, a := range append(spExactAlgos, collectives.AlgoAuto) {
		var bytes [2]int64
		for i, m := range []collectives.CostModel{slowNet, fastNet} {
			opts := collectives.SparseOptions{Algo: a, Model: m}
			outs, stats, sent, errs := spRun(t, in, opts)
			for r := range p {
				if errs[r] != nil {
					t.Fatalf("%v rank %d: %v", a, r, errs[r])
				}
				if err := spCheckResult(outs[r], ref, dim); err != nil {
					t.Fatalf("%v rank %d: %v", a, r, err)
				}
				if want := i == 0; stats[r].PackedIndices != want {
					t.Fatalf("%v with %+v: rank %d packed=%v, want %v", a, m, r, stats[r].PackedIndices, want)
				}
				bytes[i] += sent[r]
			}
			pred := collectives.PredictSparseExact(m, stats[0].Algo, in, opts, stats[0].Bounds)
			for r := range p {
				if pred.BytesSent[r] != sent[r] {
					t.Fatalf("%v with %+v: rank %d sent %d bytes, predicted %d", a, m, r, sent[r], pred.BytesSent[r])
				}
			}
		}
		if bytes[0] >= bytes[1] {
			t.Errorf("%v: packed sent %d bytes, raw %d", a, bytes[0], bytes[1])
		}
	}
}

// spUniformInput holds about frac*dim entries at random positions, small
// integer values so every summation order gives the same result.
func spUniformInput(rng *rand.Rand, dim int, frac float64) *sparse.Vector[float32] {
	v := &sparse.Vector[float32]{Dim: dim}
	for i := range dim {
		if rng.Float64() < frac {
			v.Indices = append(v.Indices, uint32(i))
			v.Values = append(v.Values, float32(1+rng.IntN(9)))
		}
	}
	return v
}

// TestChooseLossyPastDenseUnion: at 10% per rank on 8 ranks the union
// fills over half the dimension; on a 1 Gbit/s network a q4 split
// schedule, whose ranges travel at 4 bits a value, is chosen over the
// exact dense allreduce that moves 8 times the bytes (the 8-host
// 1 Gbit/s cluster measured it 3-6x faster), and with exact values DSAR.
func TestChooseLossyPastDenseUnion(t *testing.T) {
	const p, dim = 8, 1 << 24
	nnz := sparseModelCounts(p, dim, 0.1, 1)
	got := slowNet.ChooseSparseOrDenseQuant(p, dim, 4, quant.Q4, nnz)
	if got != collectives.AlgoDSAR && got != collectives.AlgoSSARSplitAllgather {
		t.Errorf("q4 at 10%% on 1 Gbit/s: %v, want a split schedule", got)
	}
	if got := slowNet.ChooseSparseOrDense(p, dim, 4, nnz); got != collectives.AlgoDSAR {
		t.Errorf("exact at 10%% on 1 Gbit/s: %v, want dsar", got)
	}
}
