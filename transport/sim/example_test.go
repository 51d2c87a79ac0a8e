package sim_test

import (
	"context"
	"fmt"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport/sim"
)

// The library's ring allreduce on 64 simulated ranks with 10 Gbit/s NICs
// and 5 us of latency, no computation charged: its time is the closed
// form 2(P-1)·L + 2(P-1)/P·n·G.
func Example() {
	w, err := sim.New(sim.Config{Ranks: 64, Rate: 1.25e9, Latency: 5e-6,
		Compute: sim.Compute{Mode: sim.ComputeNone}})
	if err != nil {
		panic(err)
	}
	data := make([][]float32, 64)
	ends, err := w.Run(func(t *sim.Transport) {
		v := make([]float32, 64*1024) // 256 KiB
		for i := range v {
			v[i] = float32(t.Rank())
		}
		op := &collectives.Op{Ctx: context.Background(), T: t, Comm: 1, Seq: 1}
		if _, err := collectives.Allreduce(op, v, collectives.Sum, collectives.AlgoRing, collectives.DefaultCostModel); err != nil {
			panic(err)
		}
		data[t.Rank()] = v
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("rank 0 finished at %.1f us; element 0 is %v\n", ends[0]*1e6, data[0][0])
	// Output: rank 0 finished at 1042.9 us; element 0 is 2016
}
