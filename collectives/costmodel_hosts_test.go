package collectives_test

import (
	"math"
	"testing"

	"github.com/sparcml/sparcml/collectives"
)

// TestAllreduceOnSharedLinks checks the dense model on hosts of l ranks
// sharing one link against the bytes counted from the butterfly: with
// latencies and reductions free and the local link free, Rabenseifner's
// rounds of distance l..p/2 move n*d/p per rank in each of its two
// halves, l ranks at once through the host's link, 2*l*n*(1-l/p) bytes in
// all; recursive doubling's log2(p/l) cross-host rounds move l*n each;
// the ring's steps are the flat ones; and with one rank per host (l = 1,
// no hierarchy) the flat model.
func TestAllreduceOnSharedLinks(t *testing.T) {
	const beta = 1e-9
	m := collectives.CostModel{Beta: beta, LocalBeta: 1e-30}
	for _, c := range []struct{ p, l int }{{16, 2}, {64, 8}, {256, 8}, {1024, 4}} {
		hosts := make([]int, c.p)
		for r := range hosts {
			hosts[r] = r / c.l
		}
		topo := &collectives.Topology{Hosts: hosts}
		const n = 1 << 20
		P, L := float64(c.p), float64(c.l)
		want := map[collectives.Algo]float64{
			collectives.AlgoRabenseifner:      2 * L * n * (1 - L/P) * beta,
			collectives.AlgoRecursiveDoubling: math.Log2(P/L) * L * n * beta,
			collectives.AlgoRing:              2 * (P - 1) / P * n * beta,
		}
		for a, w := range want {
			got := m.PredictAllreduceOn(a, topo, n, c.p)
			if math.Abs(got-w) > 1e-9*w {
				t.Errorf("p %d, %d per host, %v: %v s, want %v", c.p, c.l, a, got, w)
			}
		}
	}
}
