package collectives_test

import (
	"testing"

	"github.com/sparcml/sparcml/quant"
)

// TestQuantizedAllreducePipelineUneven runs the pipelined schedule where
// blocks have different numbers of segments (a balanced block one element
// longer than a multiple of the segment takes one more), with segments of
// 16 elements, far fewer than the rounds' lag, and many rounds, for the
// fixed-width codecs (whose owner step runs in chunks) and a stochastic
// one. Each result is checked against the float64 sum of every rank's input
// with the codec's bound, replicas bit for bit, and bytes against the
// prediction.
func TestQuantizedAllreducePipelineUneven(t *testing.T) {
	const seg = 16
	for _, p := range []int{2, 3, 4} {
		for _, n := range []int{p*seg + 1, p*seg - 1, 3*p*seg + p - 1, 40*p*seg + 1} {
			for _, kind := range []quant.Kind{quant.None, quant.FP16, quant.BF16, quant.Q8} {
				q := quantRun{p: p, n: n, kind: kind, bucket: 8, seed: uint64(n), codecSeed: 3, seg: seg}
				checkQuantizedRun(t, q, runQuantized[float32](t, q))
			}
		}
	}
}
