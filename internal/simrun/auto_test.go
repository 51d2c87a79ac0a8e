package simrun

import (
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport/sim"
)

// TestAutoChoiceAt256 fixes the algorithm auto chooses at 256 ranks on a
// 10 Gbit/s network whose model is the simulated machine's (as `sparcml
// sim` sets it: Alpha = L, Latency = L), so that a change of the cost
// model that moves a choice shows here; and it runs every forced
// algorithm of the op on the same case to check that the choice is within
// autoSlack of the fastest in simulated time. Where own is set, auto's
// own time, its counts exchange included, must be within autoSlack too:
// the sparse points of docs/SIMULATION.md at 256 ranks (256K, 0.1% and
// 1%), where the exchange's rounds and samples took auto to 1.14x and
// 1.18x, and 1% of 64K, where 82 samples a rank took it to 1.21x. At
// 0.1% of 64K the records' bytes are a tenth of the call
// (docs/SIMULATION.md, "Auto against the best forced algorithm"), and
// only the choice is checked.
func TestAutoChoiceAt256(t *testing.T) {
	if testing.Short() {
		t.Skip("256 ranks")
	}
	model := collectives.DefaultCostModel
	model.Alpha, model.Beta, model.Latency = 5e-6, 1/1.25e9, 5e-6
	cases := []struct {
		op      string
		n       int
		density float64
		dist    string
		want    collectives.Algo
		own     bool
	}{
		{"allreduce", 1 << 8, 0, "", collectives.AlgoRecursiveDoubling, true},
		{"allreduce", 1 << 16, 0, "", collectives.AlgoRabenseifner, true},
		{"sparse-allreduce", 1 << 16, 0.001, "uniform", collectives.AlgoSSARSplitAllgather, false},
		{"sparse-allreduce", 1 << 16, 0.01, "uniform", collectives.AlgoSSARSplitAllgather, true},
		{"sparse-allreduce", 1 << 18, 0.001, "uniform", collectives.AlgoSSARSplitAllgather, true},
		{"sparse-allreduce", 1 << 18, 0.01, "uniform", collectives.AlgoSSARSplitAllgather, true},
	}
	for _, tc := range cases {
		c := Case{Op: tc.op, N: tc.n, Density: tc.density, Dist: tc.dist, Algo: collectives.AlgoAuto, Seed: 1, Model: model,
			Indices: collectives.IndexRaw}
		res := simulate(t, defaultMachine(256), c)
		if res.Algo != tc.want {
			t.Errorf("%s n=%d density %v %s: auto chose %v, want %v", tc.op, tc.n, tc.density, tc.dist, res.Algo, tc.want)
		}
		times := map[collectives.Algo]float64{}
		best := collectives.AlgoAuto
		for _, a := range forcedAlgos(tc.op, res.Algo) {
			c.Algo = a
			times[a] = simulate(t, defaultMachine(256), c).Seconds
			if best == collectives.AlgoAuto || times[a] < times[best] {
				best = a
			}
		}
		if times[res.Algo] > autoSlack*times[best] {
			t.Errorf("%s n=%d density %v %s: auto chose %v, %.0f us forced, %.2fx the fastest, %v at %.0f us",
				tc.op, tc.n, tc.density, tc.dist, res.Algo, times[res.Algo]*1e6, times[res.Algo]/times[best], best, times[best]*1e6)
		}
		t.Logf("%s n=%d density %v %s: auto %.1f us, %v forced %.1f us, the fastest %v %.1f us",
			tc.op, tc.n, tc.density, tc.dist, res.Seconds*1e6, res.Algo, times[res.Algo]*1e6, best, times[best]*1e6)
		if tc.own && res.Seconds > autoSlack*times[best] {
			t.Errorf("%s n=%d density %v %s: auto took %.0f us, its counts exchange included, %.2fx the fastest, %v at %.0f us",
				tc.op, tc.n, tc.density, tc.dist, res.Seconds*1e6, res.Seconds/times[best], best, times[best]*1e6)
		}
	}
}

// autoSlack is how much slower than the fastest forced algorithm auto's
// choice may be: within 1.1x.
const autoSlack = 1.1

// forcedAlgos are the forced algorithms of op on a flat network, and
// chosen when it is not one of them (the dense end of the sparse switch).
func forcedAlgos(op string, chosen collectives.Algo) []collectives.Algo {
	var algos []collectives.Algo
	for _, a := range Ops[op].Algos(sim.Flat) {
		if a != collectives.AlgoAuto {
			algos = append(algos, a)
		}
	}
	for _, a := range algos {
		if a == chosen {
			return algos
		}
	}
	return append(algos, chosen)
}
