package collectives_test

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
)

// Properties of the sparse cost model that follow from how it is built,
// whatever the parameters: bytes grow with the entries, each choice is the
// cheapest candidate, and the limits (no entries, dense inputs, one rank)
// come out as the rules say.

var sparseModelAlgos = []collectives.Algo{collectives.AlgoSSARRecursiveDoubling, collectives.AlgoSparseAllgather,
	collectives.AlgoSSARSplitAllgather, collectives.AlgoDSAR}

var sparseModelModels = []collectives.CostModel{
	collectives.DefaultCostModel,
	{Alpha: 200e-6, Beta: 1 / 2.5e9, Gamma: 1 / 4e9},                      // slow messages
	{Alpha: 2e-6, Beta: 1 / 25e9, Gamma: 1 / 4e9},                         // fast network
	{Alpha: 45e-6, Beta: 1 / 1.1e9, Gamma: 1 / 5e9, SparseGamma: 1 / 6e8}, // calibrated merge
}

// sparseModelCounts gives every rank frac of dim entries, the first rank
// heavy times as many (capped at dim).
func sparseModelCounts(p, dim int, frac float64, heavy int) []int {
	nnz := slices.Repeat([]int{int(frac * float64(dim))}, p)
	nnz[0] = min(dim, heavy*nnz[0])
	return nnz
}

// sparseModelUnion is the expected fraction of dim the union of supports
// of nnz entries covers.
func sparseModelUnion(dim int, nnz []int) float64 {
	miss := 1.0
	for _, k := range nnz {
		miss *= 1 - float64(k)/float64(dim)
	}
	return 1 - miss
}

var sparseModelFracs = []float64{0, 1e-5, 1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.2, 0.4, 0.6, 0.8, 1}

// TestSparseModelGrowsWithEntries: with exact values a message is the
// smaller of its sparse and dense encodings of a count or a union, both
// nondecreasing in every rank's count, so no rank's predicted bytes fall
// when the inputs grow. Times grow too, but for the schedules that merge
// with sparse.SumAll (split-allgather, allgather) only on either side of
// the point where SumAll switches from merging to its windowed kernel
// (all entries together at dim/256), which touches each entry once
// instead of log2 P times; for recursive doubling only while the union
// stays sparse.
func TestSparseModelGrowsWithEntries(t *testing.T) {
	for _, m := range sparseModelModels {
		for _, p := range []int{2, 3, 4, 5, 8, 13} {
			for _, dim := range []int{1000, 1 << 20} {
				for _, heavy := range []int{1, 8} {
					for _, a := range sparseModelAlgos {
						var prev collectives.SparsePrediction
						prevWindowed := false
						for i, f := range sparseModelFracs {
							nnz := sparseModelCounts(p, dim, f, heavy)
							pr := m.PredictSparse(a, p, dim, 4, nnz)
							total := 0
							for _, k := range nnz {
								total += k
							}
							windowed := sparse.SumsInWindows(p, total, dim) // the merge kernel changes there
							if i > 0 {
								for r := range p {
									require.GreaterOrEqual(t, pr.BytesSent[r], prev.BytesSent[r],
										"%+v P=%d dim=%d %v: rank %d sends less at %g than at %g", m, p, dim, a, r, f, sparseModelFracs[i-1])
								}
								merges := a == collectives.AlgoSSARSplitAllgather || a == collectives.AlgoSparseAllgather
								// Recursive doubling stops encoding a partial once one arrives dense
								// (it is then added into in place and sent on as it is).
								rdDense := a == collectives.AlgoSSARRecursiveDoubling && sparseModelUnion(dim, nnz) >= 0.5
								if (!merges || windowed == prevWindowed) && !rdDense {
									require.GreaterOrEqual(t, pr.Seconds, prev.Seconds,
										"%+v P=%d dim=%d %v: faster at %g than at %g", m, p, dim, a, f, sparseModelFracs[i-1])
								}
							}
							prev, prevWindowed = pr, windowed
						}
					}
				}
			}
		}
	}
}

// TestChooseSparseIsCheapest: ChooseSparse returns a candidate no other
// predicts faster, recursive doubling being a candidate only up to min(dim/32, 8192)
// entries in all; ChooseSparseOrDense returns that choice, the dense
// allreduce the dense model picks, or DSAR.
func TestChooseSparseIsCheapest(t *testing.T) {
	for _, m := range sparseModelModels {
		for _, p := range []int{2, 3, 4, 6, 8, 16} {
			for _, dim := range []int{1000, 1 << 16, 1 << 22} {
				for _, f := range sparseModelFracs {
					for _, heavy := range []int{1, 8} {
						nnz := sparseModelCounts(p, dim, f, heavy)
						total := 0
						for _, k := range nnz {
							total += k
						}
						got := m.ChooseSparse(p, dim, 4, nnz)
						// Each algorithm with its better index wire.
						predict := func(a collectives.Algo) float64 {
							return min(m.PredictSparse(a, p, dim, 4, nnz).Seconds, m.PredictSparsePacked(a, p, dim, 4, nnz).Seconds)
						}
						best := predict(got)
						for _, a := range sparseModelAlgos {
							if a == collectives.AlgoSSARRecursiveDoubling && total > min(dim/32, 8192) { // rdFitsSparse
								require.NotEqual(t, a, got, "%+v P=%d dim=%d nnz=%v", m, p, dim, nnz)
								continue
							}
							require.LessOrEqual(t, best, predict(a),
								"%+v P=%d dim=%d nnz=%v: chose %v, %v predicted faster", m, p, dim, nnz, got, a)
						}
						withDense := m.ChooseSparseOrDense(p, dim, 4, nnz)
						require.Contains(t, []collectives.Algo{got, m.ChooseAllreduce(4*dim, p), collectives.AlgoDSAR}, withDense,
							"%+v P=%d dim=%d nnz=%v", m, p, dim, nnz)
					}
				}
			}
		}
	}
}

// TestChooseSparseOrDenseLimits: inputs that fill the dimension leave only
// DSAR (exact values), the split schedules (a lossy codec) and the dense
// allreduce the dense model picks; inputs with no entries cost the sparse
// schedules their latency alone, so on a vector whose transfer dwarfs a
// few message latencies nothing that moves the dense vector is chosen.
func TestChooseSparseOrDenseLimits(t *testing.T) {
	kinds := []quant.Kind{quant.None, quant.FP16, quant.BF16, quant.Q8, quant.Q4, quant.Q2}
	for _, m := range sparseModelModels {
		for _, p := range []int{2, 3, 4, 7, 8, 16} {
			for _, dim := range []int{1000, 1 << 20} {
				dense := m.ChooseAllreduce(4*dim, p)
				full := slices.Repeat([]int{dim}, p)
				for _, kind := range kinds {
					got := m.ChooseSparseOrDenseQuant(p, dim, 4, kind, full)
					if kind == quant.None {
						require.Contains(t, []collectives.Algo{collectives.AlgoDSAR, dense}, got, "%+v P=%d dim=%d", m, p, dim)
					} else {
						require.Contains(t, []collectives.Algo{collectives.AlgoDSAR, collectives.AlgoSSARSplitAllgather, dense}, got, "%+v P=%d dim=%d %v", m, p, dim, kind)
					}
				}
			}
			const dim = 1 << 24
			for _, kind := range kinds {
				got := m.ChooseSparseOrDenseQuant(p, dim, 4, kind, make([]int, p))
				require.Contains(t, []collectives.Algo{collectives.AlgoSSARRecursiveDoubling, collectives.AlgoSparseAllgather, collectives.AlgoSSARSplitAllgather}, got,
					"%+v P=%d no entries %v", m, p, kind)
			}
		}
	}
}

// TestSparseModelOneRank: with one rank nothing is sent and nothing
// costs, except recursive doubling under a lossy codec, which is refused.
func TestSparseModelOneRank(t *testing.T) {
	m := collectives.DefaultCostModel
	for _, a := range sparseModelAlgos {
		for _, kind := range []quant.Kind{quant.None, quant.FP16, quant.Q4} {
			pr := m.PredictSparseQuant(a, 1, 1000, 4, kind, []int{500})
			require.Equal(t, []int64{0}, pr.BytesSent, "%v %v", a, kind)
			if a == collectives.AlgoSSARRecursiveDoubling && kind != quant.None {
				require.True(t, math.IsInf(pr.Seconds, 1), "%v %v: %v", a, kind, pr.Seconds)
			} else {
				require.Zero(t, pr.Seconds, "%v %v", a, kind)
			}
		}
	}
}

// TestChooseSparseOrDenseUnionThreshold: on a 1 Gbit/s network, 4 ranks
// at 10% each (an expected union of 34%) get the sparse schedule the model
// prices lowest, which there is not DSAR; 8 ranks at 10% (57%) are past
// half the dimension, where only DSAR and the dense allreduce compete.
func TestChooseSparseOrDenseUnionThreshold(t *testing.T) {
	const dim = 1 << 24
	m := slowNet
	four := slices.Repeat([]int{dim / 10}, 4)
	got := m.ChooseSparseOrDense(4, dim, 4, four)
	require.Equal(t, m.ChooseSparse(4, dim, 4, four), got)
	require.NotEqual(t, collectives.AlgoDSAR, got)
	eight := slices.Repeat([]int{dim / 10}, 8)
	require.Contains(t, []collectives.Algo{collectives.AlgoDSAR, m.ChooseAllreduce(4*dim, 8)}, m.ChooseSparseOrDense(8, dim, 4, eight))
}
