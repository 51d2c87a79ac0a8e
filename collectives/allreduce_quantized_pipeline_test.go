package collectives_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sparcml/sparcml/collectives"
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
				res := runQuantized[float32](t, quantRun{p: p, n: n, kind: kind, bucket: 8, seed: uint64(n), codecSeed: 3, seg: seg})
				requireNoErrors(t, res.errs)
				requireIdentical(t, res.outputs)
				ref := newQuantRef(res.inputs)
				bound := func(i int) float64 { return halfBound(kind, p, ref.abs[i], ref.sum[i]) }
				if kind.Stochastic() {
					hard, _, _ := stochasticBounds(kind, ref)
					bound = func(int) float64 { return hard }
				}
				for i, got := range res.outputs[0] {
					require.LessOrEqual(t, math.Abs(float64(got)-ref.sum[i]), bound(i), "P%d n %d %v element %d", p, n, kind, i)
				}
				codec := codecFor(t, kind, 8, 0, 0)
				for r := range p {
					require.Equal(t, uint64(collectives.QuantizedBytesSentSeg(n, seg, p, r, codec)), res.stats[r].BytesSent, "rank %d", r)
				}
			}
		}
	}
}
