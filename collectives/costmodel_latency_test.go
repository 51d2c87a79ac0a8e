package collectives_test

import (
	"math"
	"slices"
	"testing"

	"github.com/sparcml/sparcml/collectives"
)

// TestSparseRoundLatency checks the latency and per-message terms of the
// sparse predictions (CostModel.Latency) against closed forms counted
// from the schedules: with bytes and reductions free, a phase of
// messages posted together costs one Latency plus Alpha-Latency per
// message, and rounds that each wait for the one before cost Latency
// each. Scatter to owners: one round of p-1 messages. Bruck allgather:
// ceil(log2 p) rounds of one message. DSAR's ring allgather: p-1 rounds
// of one message (blocks of a few bytes, one segment each). SSAR
// recursive doubling: log2 p rounds of one message (p a power of two).
// Latency 0 is the model without the term: every message a full Alpha.
func TestSparseRoundLatency(t *testing.T) {
	const alpha = 20e-6
	for _, latency := range []float64{0, 5e-6, alpha} {
		m := collectives.CostModel{Alpha: alpha, Latency: latency}
		perMsg := alpha - latency
		for _, p := range []int{2, 8, 64, 256} {
			dim := 64 * p
			nnz := slices.Repeat([]int{1}, p)
			logP := math.Ceil(math.Log2(float64(p)))
			scatter := latency + float64(p-1)*perMsg
			want := map[collectives.Algo]float64{
				collectives.AlgoSSARRecursiveDoubling: logP * alpha,
				collectives.AlgoSSARSplitAllgather:    scatter + logP*alpha,
				collectives.AlgoDSAR:                  scatter + float64(p-1)*alpha,
				collectives.AlgoSparseAllgather:       logP * alpha,
			}
			for a, w := range want {
				got := m.PredictSparse(a, p, dim, 4, nnz).Seconds
				if math.Abs(got-w) > 1e-12 {
					t.Errorf("latency %v, p %d, %v: predicted %v s, want %v", latency, p, a, got, w)
				}
			}
		}
	}
}
