package simrun

import (
	"testing"

	"github.com/sparcml/sparcml/collectives"
)

// TestAutoChoiceAt256 fixes the algorithm auto chooses at 256 ranks on a
// 10 Gbit/s network whose model is the simulated machine's, so that a
// change of the cost model that moves a choice shows here (and is checked
// against the simulated times with `sparcml sim --algo auto,...`).
func TestAutoChoiceAt256(t *testing.T) {
	if testing.Short() {
		t.Skip("256 ranks")
	}
	model := collectives.DefaultCostModel
	model.Alpha, model.Beta = 5e-6, 1/1.25e9
	cases := []struct {
		op      string
		n       int
		density float64
		dist    string
		want    collectives.Algo
	}{
		{"allreduce", 1 << 8, 0, "", collectives.AlgoRecursiveDoubling},
		{"allreduce", 1 << 16, 0, "", collectives.AlgoRabenseifner},
		{"sparse-allreduce", 1 << 16, 0.001, "uniform", collectives.AlgoSparseAllgather},
		{"sparse-allreduce", 1 << 16, 0.01, "uniform", collectives.AlgoRabenseifner},
	}
	for _, tc := range cases {
		c := Case{Op: tc.op, N: tc.n, Density: tc.density, Dist: tc.dist, Algo: collectives.AlgoAuto, Seed: 1, Model: model}
		res := simulate(t, defaultMachine(256), c)
		if res.Algo != tc.want {
			t.Errorf("%s n=%d density %v %s: auto chose %v, want %v", tc.op, tc.n, tc.density, tc.dist, res.Algo, tc.want)
		}
	}
}
