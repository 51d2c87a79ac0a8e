package simrun

import (
	"reflect"
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport/sim"
)

// TestMeasuredWarmCall: with measured compute the timed call follows a
// warm-up call in the same job; the timed call's bytes are one call's (the
// model's prediction), its result is checked, and on two shared cores it
// takes at least the network alone.
func TestMeasuredWarmCall(t *testing.T) {
	c := Case{Op: "sparse-allreduce", N: 1 << 16, Density: 0.01, Dist: "uniform", Algo: collectives.AlgoSSARRecursiveDoubling, Seed: 4,
		Model: collectives.DefaultCostModel}
	cfg := defaultMachine(8)
	cfg.Compute.Mode = sim.ComputeNone
	network := simulate(t, cfg, c)
	cfg.Compute.Mode, cfg.Cores = sim.ComputeMeasured, 2
	res := simulate(t, cfg, c)
	if !reflect.DeepEqual(res.BytesSent, res.PredictedB) {
		t.Errorf("bytes sent %v, the model predicts %v", res.BytesSent, res.PredictedB)
	}
	if res.Seconds < network.Seconds {
		t.Errorf("measured compute on 2 cores: %v s, less than the network alone (%v s)", res.Seconds, network.Seconds)
	}
}
