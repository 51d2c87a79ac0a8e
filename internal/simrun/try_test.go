package simrun

import (
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport/sim"
)

func TestTry(t *testing.T) {
	for _, op := range OpNames() {
		for _, a := range Ops[op].Algos() {
			cfg := sim.Config{Ranks: 64, Rate: 1.25e9, Latency: 5e-6, Topology: sim.Hosts, RanksPerHost: 8}
			c := Case{Op: op, N: 100000, Density: 0.01, Dist: "uniform", Algo: a, Seed: 1, Model: collectives.DefaultCostModel}
			res, err := Run(cfg, c, true)
			t.Logf("%s %v: algo %v time %.1fus wrong %d sent %d pred %d busiest %v pred %.1fus err %v", op, a, res.Algo, res.Seconds*1e6, res.Wrong, res.BytesSent[0], res.PredictedB[0], res.Busiest, res.Predicted*1e6, err)
		}
	}
}
