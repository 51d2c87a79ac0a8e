package simrun

import (
	"fmt"
	"math"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport/sim"
)

// sparseAllreduce is SparseAllreduce of float32 vectors of seeded
// supports (uniform or power-law) and small integer values.
type sparseAllreduce struct{}

func (sparseAllreduce) Algos(sim.Topology) []collectives.Algo {
	return []collectives.Algo{collectives.AlgoAuto, collectives.AlgoSSARRecursiveDoubling,
		collectives.AlgoSSARSplitAllgather, collectives.AlgoDSAR, collectives.AlgoSparseAllgather}
}

type sparseInstance struct {
	c      Case
	p      int
	inputs []*sparse.Vector[float32]
	outs   []*sparse.Vector[float32]
	stats  []collectives.SparseStats
}

func (sparseAllreduce) Prepare(c Case, p int) (Instance, error) {
	if c.N < 1 || c.Density < 0 || c.Density > 1 {
		return nil, fmt.Errorf("sparse allreduce of %d elements at density %v", c.N, c.Density)
	}
	if c.Dist != "uniform" && c.Dist != "powerlaw" {
		return nil, fmt.Errorf("unknown distribution %q (uniform, powerlaw)", c.Dist)
	}
	s := &sparseInstance{c: c, p: p, inputs: make([]*sparse.Vector[float32], p),
		outs: make([]*sparse.Vector[float32], p), stats: make([]collectives.SparseStats, p)}
	for r := range p {
		s.inputs[r] = SparseInput(c.N, c.Density, c.Dist, c.Seed, r)
	}
	return s, nil
}

func (s *sparseInstance) opts() collectives.SparseOptions {
	return collectives.SparseOptions{Algo: s.c.Algo, Model: s.c.Model, Quant: s.c.Quant, Indices: s.c.Indices}
}

func (s *sparseInstance) Run(op *collectives.Op, rank int) (collectives.Algo, error) {
	s.outs[rank] = &sparse.Vector[float32]{}
	st, err := collectives.SparseAllreduce(op, s.inputs[rank], s.outs[rank], s.opts())
	s.stats[rank] = st
	if !s.c.keep {
		s.outs[rank] = nil
	}
	return st.Algo, err
}

// Wrong compares every rank's result with the sum of the inputs; with a
// lossy codec a value counts as wrong beyond the codec's error bound for
// the number of ranks.
func (s *sparseInstance) Wrong() int64 {
	want := make([]float32, s.c.N)
	for _, in := range s.inputs {
		if err := in.AddTo(want); err != nil {
			return int64(s.c.N) * int64(s.p)
		}
	}
	tol := 0.0
	if s.c.Quant != 0 {
		tol = 0.02 * 8 * float64(s.p) // relative error of the coarsest kinds, on values up to 8 per rank
	}
	var wrong int64
	got := make([]float32, s.c.N)
	for _, out := range s.outs {
		clear(got)
		if err := out.AddTo(got); err != nil {
			wrong += int64(s.c.N)
			continue
		}
		for i := range got {
			if math.Abs(float64(got[i]-want[i])) > tol {
				wrong++
			}
		}
	}
	return wrong
}

func (s *sparseInstance) Predict(algo collectives.Algo) (float64, []int64) {
	pred := collectives.PredictSparseExact(s.c.Model, algo, s.inputs, s.opts(), s.stats[0].Bounds)
	return pred.Seconds, pred.BytesSent
}

// SparseInput is rank's seeded input of n elements at density d: uniform
// (each index present with probability d) or power-law (d·n draws of
// n·u^3, the low indices hot, merged when they repeat); values 1 to 8.
func SparseInput(n int, d float64, dist string, seed uint64, rank int) *sparse.Vector[float32] {
	x := seed*0x9E3779B97F4A7C15 ^ uint64(rank+1)*0xD1B54A32D192ED03
	next := func() uint64 {
		x += 0x9E3779B97F4A7C15
		z := (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		return z ^ (z >> 31)
	}
	val := func() float32 { return float32(next()%8 + 1) }
	if dist == "powerlaw" {
		k := int(d * float64(n))
		idx := make([]uint32, k)
		vals := make([]float32, k)
		for i := range idx {
			u := float64(next()>>11) / (1 << 53)
			idx[i] = uint32(min(float64(n-1), float64(n)*u*u*u))
			vals[i] = val()
		}
		v, err := sparse.FromUnsorted(n, idx, vals)
		if err != nil {
			panic(err) // indices are below n by construction
		}
		return v
	}
	threshold := uint64(d * float64(math.MaxUint64))
	if d >= 1 {
		threshold = math.MaxUint64
	}
	v := &sparse.Vector[float32]{Dim: n}
	for i := range n {
		if d > 0 && next() <= threshold {
			v.Indices = append(v.Indices, uint32(i))
			v.Values = append(v.Values, val())
		}
	}
	return v
}
