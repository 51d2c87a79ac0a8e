package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/sparse"
)

// parseDensities reads "0.01,0.1" (fractions in [0,1]) or percentages "1%".
func parseDensities(s string) ([]float64, error) {
	var out []float64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		scale := 1.0
		if strings.HasSuffix(part, "%") {
			part, scale = strings.TrimSuffix(part, "%"), 0.01
		}
		d, err := strconv.ParseFloat(part, 64)
		d *= scale
		if err != nil || d < 0 || d > 1 || math.IsNaN(d) {
			return nil, fmt.Errorf("bad --density %q (want fractions in [0,1] such as 0.01,0.1 or 1%%)", s)
		}
		out = append(out, d)
	}
	return out, nil
}

// sparseInput builds rank's input of dimension n: with dist "uniform" each
// index is present with probability d; with "powerlaw" d*n draws follow a
// power law towards low indices (duplicates combined), so a few index
// ranges hold most entries. Values are small integers so every sum is
// exact.
func sparseInput[T sparcml.Float](n int, d float64, dist string, seed uint64, rank int) *sparse.Vector[T] {
	x := seed*0x9E3779B97F4A7C15 ^ uint64(rank+1)*0xD1B54A32D192ED03
	next := func() uint64 {
		x += 0x9E3779B97F4A7C15
		z := (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		return z ^ (z >> 31)
	}
	val := func() T { return T(int(next()%8) + 1) } // never zero
	if dist == "powerlaw" {
		k := int(d * float64(n))
		idx := make([]uint32, k)
		vals := make([]T, k)
		for i := range idx {
			u := float64(next()>>11) / (1 << 53)
			idx[i] = uint32(math.Min(float64(n-1), float64(n)*u*u*u))
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
	var idx []uint32
	var vals []T
	for i := 0; i < n; i++ {
		if next() <= threshold && d > 0 {
			idx = append(idx, uint32(i))
			vals = append(vals, val())
		}
	}
	return &sparse.Vector[T]{Dim: n, Indices: idx, Values: vals}
}

// benchSparse measures SparseAllreduce or SparseAllgather at dimension n
// and density d, and with --vs-dense the dense allreduce of the same n in
// the same run.
func benchSparse[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, n int, d float64) ([]result, error) {
	p, me := c.Size(), c.Rank()
	inputs := make([]*sparse.Vector[T], p)
	for r := range inputs {
		if r == me || cfg.check || cfg.op == "sparse-allreduce" {
			inputs[r] = sparseInput[T](n, d, cfg.dist, cfg.seed, r)
		}
	}
	in := inputs[me]
	var ref []T
	if cfg.check && cfg.op == "sparse-allreduce" {
		ref = make([]T, n)
		for _, v := range inputs {
			for i, x := range v.Indices {
				ref[x] += v.Values[i]
			}
		}
	}
	out := &sparse.Vector[T]{}
	var gathered []*sparse.Vector[T]
	var dense []T
	var stats sparcml.SparseStats
	opts := []sparcml.CallOption{sparcml.WithAlgo(cfg.algo), sparcml.WithQuant(cfg.quant)}
	if cfg.balanced {
		opts = append(opts, sparcml.WithBalancedRanges())
	}
	run := func() error {
		var err error
		if cfg.op == "sparse-allgather" {
			gathered, err = sparcml.SparseAllgather(ctx, c, in, gathered)
			return err
		}
		stats, err = sparcml.SparseAllreduce(ctx, c, in, out, opts...)
		return err
	}
	verify := func() bool {
		if cfg.op == "sparse-allgather" {
			for r, v := range gathered {
				if !equal(v.ToDense(nil), inputs[r].ToDense(nil)) {
					return false
				}
			}
			return len(gathered) == p
		}
		dense = out.ToDense(dense)
		if cfg.quant != sparcml.QuantNone {
			// Values are in [1, 8]: scale at most 8 per contribution, 8p
			// for a reduced range.
			return within(dense, ref, quantTolerance(cfg.quant, p)*2)
		}
		return equal(dense, ref)
	}
	times := make([]float64, cfg.iters)
	ok := true
	before := c.Stats()
	for it := -cfg.warmup; it < cfg.iters; it++ {
		if err := c.Barrier(ctx); err != nil {
			return nil, err
		}
		if it == 0 {
			before = c.Stats()
		}
		t0 := time.Now()
		if err := run(); err != nil {
			return nil, err
		}
		if it >= 0 {
			times[it] = time.Since(t0).Seconds()
			if cfg.check && !verify() {
				ok = false
			}
		}
	}
	sent := float64(c.Stats().Sub(before).BytesSent) / float64(cfg.iters)
	op := sparseSized{n: n, bytes: int64(n) * int64(sparse.ValueSize[T]())}
	algo := stats.Algo
	if cfg.op == "sparse-allgather" {
		algo = collectives.AlgoDirect
	}
	row, err := summarize(ctx, c, cfg, op, times, ok, sent, algo, c.Transport())
	if err != nil {
		return nil, err
	}
	row.Density = d
	row.NNZIn = in.NNZ()
	if cfg.op == "sparse-allreduce" {
		row.NNZOut = out.NNZ()
		nnz := make([]int, p)
		for r, v := range inputs {
			nnz[r] = v.NNZ()
		}
		// The model's prediction from the nonzero counts alone (what
		// AlgoAuto sees), the largest over ranks like the measurement.
		vs := sparse.ValueSize[T]()
		if dense := stats.Algo == collectives.AlgoRing || stats.Algo == collectives.AlgoRabenseifner ||
			stats.Algo == collectives.AlgoRecursiveDoubling; dense {
			for r := 0; r < p; r++ {
				row.PredictedBytes = max(row.PredictedBytes, collectives.AllreduceBytesSent(stats.Algo, n, vs, p, r))
			}
		} else {
			pred := c.CostModel().PredictSparseQuant(stats.Algo, p, n, vs, cfg.quant, nnz)
			for _, b := range pred.BytesSent {
				row.PredictedBytes = max(row.PredictedBytes, b)
			}
		}
	}
	rows := []result{row}
	if cfg.vsDense && cfg.op == "sparse-allreduce" {
		dcfg := *cfg
		dcfg.op, dcfg.check, dcfg.algo, dcfg.algoName = "allreduce", false, collectives.AlgoAuto, "auto"
		drows, err := benchSize[T](ctx, c, &dcfg, n)
		if err != nil {
			return nil, err
		}
		if drows[0].TimeMedian > 0 && row.TimeMedian > 0 {
			rows[0].SpeedupVsDense = drows[0].TimeMedian / row.TimeMedian
		}
		rows = append(rows, drows[0])
	}
	return rows, nil
}

// sparseSized gives summarize the size of a sparse operation: bandwidths
// are quoted against the dense vector's bytes, as a dense allreduce of the
// same dimension would move them.
type sparseSized struct {
	n     int
	bytes int64
}

func (s sparseSized) prepare()                                      {}
func (s sparseSized) run(context.Context) (sparcml.Algo, error)     { return 0, nil }
func (s sparseSized) verify() bool                                  { return true }
func (s sparseSized) size() (n int, bytes int64, busFactor float64) { return s.n, s.bytes, 1 }
