package sim_test

import (
	"slices"
	"testing"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/transport/sim"
)

// TestCores: P ranks that each reduce for d seconds at once take turns
// on C shared cores, first come first served (goroutine start order
// breaks the tie): ceil(P/C) rounds of d; with a core per rank (Cores 0),
// every rank ends at d.
func TestCores(t *testing.T) {
	const p, bytes, gamma = 5, 1 << 20, 1e-9 // 1 ns per byte: d = bytes ns
	d := float64(bytes) * gamma
	for _, tc := range []struct {
		cores int
		want  []float64 // every rank's end, rank order
	}{
		{0, []float64{d, d, d, d, d}},
		{2, []float64{d, d, 2 * d, 2 * d, 3 * d}},
		{5, []float64{d, d, d, d, d}},
	} {
		w, err := sim.New(sim.Config{Ranks: p, Rate: rate, Cores: tc.cores,
			Compute: sim.Compute{Mode: sim.ComputeModel, Gamma: gamma}})
		if err != nil {
			t.Fatal(err)
		}
		ends, err := w.Run(func(tr *sim.Transport) {
			transport.Work(tr, transport.KernelReduce, bytes)
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(ends, tc.want, near) {
			t.Errorf("cores %d: ends %v, want %v", tc.cores, ends, tc.want)
		}
	}
	if _, err := sim.New(sim.Config{Ranks: 2, Rate: rate, Cores: -1}); err == nil {
		t.Error("Cores -1 accepted")
	}
}
