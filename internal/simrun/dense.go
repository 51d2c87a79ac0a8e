package simrun

import (
	"fmt"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport/sim"
)

// denseAllreduce is the dense allreduce of float32 vectors whose values
// are small integers, so that every summation order gives the exact sum.
type denseAllreduce struct{}

func (denseAllreduce) Algos(topology sim.Topology) []collectives.Algo {
	algos := []collectives.Algo{collectives.AlgoAuto, collectives.AlgoRing, collectives.AlgoRabenseifner,
		collectives.AlgoRecursiveDoubling}
	if topology != sim.Flat {
		algos = append(algos, collectives.AlgoHierarchical)
	}
	return algos
}

type denseInstance struct {
	c    Case
	p    int
	data [][]float32
}

func (denseAllreduce) Prepare(c Case, p int) (Instance, error) {
	if c.N < 0 {
		return nil, fmt.Errorf("allreduce of %d elements", c.N)
	}
	return &denseInstance{c: c, p: p, data: make([][]float32, p)}, nil
}

// denseValue is rank's input at i: below 16, so sums of up to 2^20 ranks
// are exact in float32.
func denseValue(seed uint64, rank, i int) float32 {
	return float32((uint64(rank)*7 + uint64(i)*3 + seed) % 16)
}

func (d *denseInstance) Run(op *collectives.Op, rank int) (collectives.Algo, error) {
	v := make([]float32, d.c.N)
	for i := range v {
		v[i] = denseValue(d.c.Seed, rank, i)
	}
	if d.c.keep {
		d.data[rank] = v
	}
	return collectives.Allreduce(op, v, collectives.Sum, d.c.Algo, d.c.Model)
}

func (d *denseInstance) Wrong() int64 {
	var wrong int64
	for i := range d.c.N {
		var want float32
		for r := range d.p {
			want += denseValue(d.c.Seed, r, i)
		}
		for r := range d.p {
			if d.data[r][i] != want {
				wrong++
			}
		}
	}
	return wrong
}

func (d *denseInstance) Predict(algo collectives.Algo) (float64, []int64) {
	bytes := 4 * d.c.N
	secs := d.c.Model.PredictAllreduceOn(algo, d.c.topo, bytes, d.p)
	sent := make([]int64, d.p)
	for r := range sent {
		sent[r] = collectives.AllreduceBytesSent(algo, d.c.N, 4, d.p, r)
	}
	return secs, sent
}
