package simrun

import (
	"math"
	"math/bits"
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport/sim"
)

// The machine of the closed forms: no contention beyond what the schedule
// itself makes, nothing charged for computation.
const (
	cfAlpha = 5e-6
	cfRate  = 1.25e9 // bytes/s: beta = 0.8 ns
)

func closedFormMachine(p, segment int) sim.Config {
	return sim.Config{Ranks: p, Rate: cfRate, Latency: cfAlpha, Compute: sim.Compute{Mode: sim.ComputeNone},
		SegmentBytes: segment}
}

func simulate(t *testing.T, cfg sim.Config, c Case) Result {
	t.Helper()
	if c.Model == (collectives.CostModel{}) {
		c.Model = collectives.DefaultCostModel
	}
	res, err := Run(cfg, c, true)
	if err != nil {
		t.Fatalf("%s %v on %d ranks: %v", c.Op, c.Algo, cfg.Ranks, err)
	}
	if res.Wrong != 0 {
		t.Fatalf("%s %v on %d ranks: %d wrong elements", c.Op, c.Algo, cfg.Ranks, res.Wrong)
	}
	return res
}

// closedFormN is the vector of the closed-form tests on p ranks: blocks of
// 64 elements at P = 64 (the segmented ring cuts them into 4 segments),
// of one element at P = 1024, where the time goes to the 2(P-1) steps'
// messages and copying a larger vector would only slow the test.
func closedFormN(p int) int {
	if p > 64 {
		return p
	}
	return 64 * p
}

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-9*want }

// TestClosedFormsDense: each dense algorithm's simulated time is its
// formula in docs/ALGORITHMS.md (alpha-beta, gamma = 0) for the schedule
// as implemented, at 64 and 1024 ranks, unsegmented and in segments.
func TestClosedFormsDense(t *testing.T) {
	beta := 1 / cfRate
	for _, p := range []int{64, 1024} {
		P, L := float64(p), float64(bits.Len(uint(p))-1)
		n := closedFormN(p)  // elements: every ring block the same size
		nb := 4 * float64(n) // bytes
		unsegmented := 1 << 30
		cases := []struct {
			algo    collectives.Algo
			segment int
			want    float64
		}{
			{collectives.AlgoRing, unsegmented, 2*(P-1)*cfAlpha + 2*(P-1)/P*nb*beta},
			{collectives.AlgoRecursiveDoubling, unsegmented, L * (cfAlpha + nb*beta)},
			{collectives.AlgoRabenseifner, unsegmented, 2*L*cfAlpha + 2*(P-1)/P*nb*beta},
			// Segments of s bytes pipeline behind the first: every
			// message of the ring costs alpha + s*beta, and the last of
			// the nseg segments of a step trails the first by
			// (nseg-1)*s*beta (alpha dominates: no egress queue builds).
			{collectives.AlgoRing, 64, 2*(P-1)*(cfAlpha+64*beta) + (4*float64(n/p)/64-1)*64*beta},
			// Recursive doubling sends its nseg segments of a round at
			// once: the round costs alpha + n*beta as a whole.
			{collectives.AlgoRecursiveDoubling, n, L * (cfAlpha + nb*beta)},
		}
		for _, tc := range cases {
			if p > 64 && tc.segment < n {
				continue // the segmented ring's 8M messages at 1024 ranks: too slow for make test
			}
			res := simulate(t, closedFormMachine(p, tc.segment), Case{Op: "allreduce", N: n, Algo: tc.algo, Seed: 1})
			if !near(res.Seconds, tc.want) {
				t.Errorf("P=%d %v segments of %d bytes: simulated %.6g us, formula %.6g us", p, tc.algo, tc.segment, res.Seconds*1e6, tc.want*1e6)
			}
		}
	}
}

// TestClosedFormsWithGamma: with reductions charged at the model's Gamma
// (--compute model) and no contention, the unsegmented dense algorithms
// take exactly the cost model's predicted time, gamma term included (at
// 64 and 256 ranks: TestClosedFormsDense has the schedules at 1024).
func TestClosedFormsWithGamma(t *testing.T) {
	for _, p := range []int{64, 256} {
		n := closedFormN(p)
		cfg := closedFormMachine(p, 1<<30)
		cfg.Compute = sim.Compute{Mode: sim.ComputeModel}
		model := collectives.CostModel{Alpha: cfAlpha, Beta: 1 / cfRate, Gamma: 1 / 4e9}
		for _, a := range []collectives.Algo{collectives.AlgoRing, collectives.AlgoRecursiveDoubling, collectives.AlgoRabenseifner} {
			res := simulate(t, cfg, Case{Op: "allreduce", N: n, Algo: a, Seed: 1, Model: model})
			if !near(res.Seconds, res.Predicted) {
				t.Errorf("P=%d %v: simulated %.6g us, the model predicts %.6g us", p, a, res.Seconds*1e6, res.Predicted*1e6)
			}
		}
	}
}
