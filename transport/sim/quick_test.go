package sim_test

import (
	"context"
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/transport/sim"
)

func TestQuick(t *testing.T) {
	for _, algo := range []collectives.Algo{collectives.AlgoRing, collectives.AlgoRecursiveDoubling, collectives.AlgoRabenseifner} {
		w, err := sim.New(sim.Config{Ranks: 8, Rate: 1e9, Latency: 1e-6, Compute: sim.Compute{Mode: sim.ComputeNone}})
		if err != nil {
			t.Fatal(err)
		}
		errs := make([]error, 8)
		data := make([][]float32, 8)
		ends, err := w.Run(func(tr *sim.Transport) {
			r := tr.Rank()
			data[r] = make([]float32, 1000)
			for i := range data[r] {
				data[r][i] = float32(r*1000 + i)
			}
			op := &collectives.Op{Ctx: context.Background(), T: tr, Comm: 1, Seq: 1, Pool: &collectives.Buffers{}}
			_, errs[r] = collectives.Allreduce(op, data[r], collectives.Sum, algo, collectives.DefaultCostModel)
		})
		t.Log(algo, ends, err, errs[0], data[0][:3], w.Busiest())
	}
	_ = transport.Tag{}
}
