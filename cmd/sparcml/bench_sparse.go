package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/collectives"
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
func sparseInput[T sparcml.Float](n int, d float64, dist string, seed uint64, rank int) *sparcml.SparseVector[T] {
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
		v, err := sparcml.SparseVectorFromUnsorted(n, idx, vals)
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
	return &sparcml.SparseVector[T]{Dim: n, Indices: idx, Values: vals}
}

// widen makes v a row-sparse vector of rows of width values (v itself
// when width is 1): row i's value j is its entry's value plus j%4, small
// integers still, so every sum is exact.
func widen[T sparcml.Float](v *sparcml.SparseVector[T], width int) *sparcml.SparseVector[T] {
	if width == 1 {
		return v
	}
	vals := make([]T, 0, len(v.Values)*width)
	for _, x := range v.Values {
		for j := range width {
			vals = append(vals, x+T(j%4))
		}
	}
	w, err := sparcml.NewRowSparseVector(v.Dim, width, v.Indices, vals)
	if err != nil {
		panic(err) // v was valid
	}
	return w
}

// sparseCase is one algorithm of a sparse benchmark: its options, its
// output, and what its timed iterations measured.
type sparseCase[T sparcml.Float] struct {
	name  string
	opts  []sparcml.CallOption
	out   *sparcml.SparseVector[T]
	stats sparcml.SparseStats
	times []float64
	sent  uint64 // payload bytes this rank sent in the timed iterations
	wrong int64
}

// benchSparse measures SparseAllreduce or SparseAllgather at dimension n
// and density d, and with --vs-dense the dense allreduce of the same
// vectors in the same run. With several --algo the algorithms take turns
// iteration by iteration, each iteration starting with the next one, so
// that their times are measured side by side under the same load.
func benchSparse[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, n int, d float64) ([]result, error) {
	p, me := c.Size(), c.Rank()
	inputs := make([]*sparcml.SparseVector[T], p)
	for r := range inputs {
		if r == me || cfg.check || cfg.op == "sparse-allreduce" {
			inputs[r] = widen(sparseInput[T](n, d, cfg.dist, cfg.seed, r), cfg.block)
		}
	}
	in := inputs[me]
	var ref []T // the dense result of the allreduce
	if cfg.check && cfg.op == "sparse-allreduce" {
		b := cfg.block
		ref = make([]T, n*b)
		for _, v := range inputs {
			for i, x := range v.Indices {
				for j := range b {
					ref[int(x)*b+j] += v.Values[i*b+j]
				}
			}
		}
		averaged(ref, cfg.redop, p)
	}
	// Values are in [1, 8], twice the dense inputs' largest magnitude.
	tol := 2 * quantTolerance(cfg.quant, p, cfg.redop)
	gathered := make([]*sparcml.SparseVector[T], p)
	var dense []T
	cases := make([]*sparseCase[T], len(cfg.algos))
	for i, a := range cfg.algos {
		cs := &sparseCase[T]{name: cfg.algoNames[i], out: &sparcml.SparseVector[T]{}, times: make([]float64, cfg.iters),
			opts: []sparcml.CallOption{sparcml.WithAlgo(a), sparcml.WithQuant(cfg.quant), sparcml.WithIndices(cfg.indices)}}
		if cfg.balanced {
			cs.opts = append(cs.opts, sparcml.WithBalancedRanges())
		}
		if cs.name == autoTensor {
			// A tensor of its own for every size and density.
			cs.opts = append(cs.opts, sparcml.WithTensor(uint64(n)<<32^math.Float64bits(d)))
		}
		cases[i] = cs
	}
	run := func(cs *sparseCase[T]) error {
		if cfg.op == "sparse-allgather" {
			return sparcml.SparseAllgather(ctx, c, in, gathered)
		}
		var err error
		cs.stats, err = sparcml.SparseAllreduce(ctx, c, in, cs.out, cfg.redop, cs.opts...)
		return err
	}
	verify := func(cs *sparseCase[T]) int64 {
		if cfg.op == "sparse-allgather" {
			var wrong int64
			for r, v := range gathered {
				dense = v.ToDense(dense)
				wrong += countWrongSparse(dense, inputs[r], cfg.injectWrong)
			}
			return wrong
		}
		dense = cs.out.ToDense(dense)
		return countWrong(dense, ref, tol, cfg.injectWrong)
	}
	for it := -cfg.warmup; it < cfg.iters; it++ {
		for j := range cases {
			cs := cases[(j+it+cfg.warmup)%len(cases)]
			if err := c.Barrier(ctx); err != nil {
				return nil, err
			}
			before := c.Stats()
			t0 := time.Now()
			if err := run(cs); err != nil {
				return nil, fmt.Errorf("--algo %s: %w", cs.name, err)
			}
			if it >= 0 {
				cs.times[it] = time.Since(t0).Seconds()
				cs.sent += c.Stats().Sub(before).BytesSent
				if cfg.check {
					cs.wrong += verify(cs)
				}
			}
		}
	}
	var rows []result
	for _, cs := range cases {
		row, err := sparseRow(ctx, c, cfg, cs, inputs, n, d)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	if cfg.vsDense && cfg.op == "sparse-allreduce" {
		drows, err := denseOfSparse(ctx, c, cfg, in, ref, tol)
		if err != nil {
			return nil, err
		}
		for i := range rows {
			if drows[0].TimeMedian > 0 && rows[i].TimeMedian > 0 {
				rows[i].SpeedupVsDense = drows[0].TimeMedian / rows[i].TimeMedian
			}
		}
		drows[0].Density, drows[0].NNZIn = d, in.NNZ() // of the vectors it densified
		rows = append(rows, drows[0])
	}
	return rows, nil
}

// sparseRow is the result row of one algorithm of benchSparse.
func sparseRow[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, cs *sparseCase[T], inputs []*sparcml.SparseVector[T], n int, d float64) (result, error) {
	op := sparseSized{n: n, bytes: int64(n) * int64(cfg.block) * int64(collectives.DTypeOf[T]().Size())}
	algo := cs.stats.Algo
	if cfg.op == "sparse-allgather" {
		algo = sparcml.AlgoDirect
	}
	sent := float64(cs.sent) / float64(cfg.iters)
	row, err := summarize(ctx, c, cfg, op, cs.times, cs.wrong, sent, algo, c.Transport())
	if err != nil {
		return result{}, err
	}
	row.Algo = cs.name
	row.Density = d
	row.NNZIn = inputs[c.Rank()].NNZ()
	if cfg.op == "sparse-allreduce" {
		row.NNZOut = cs.out.NNZ()
		row.PredictedBytes, row.PredictedUS = predicted[T](c, cfg, cs.stats, n, inputs)
		if cfg.quant == sparcml.QuantNone && isSparseAlgo(cs.stats.Algo) {
			row.Indices = sparcml.IndexRaw.String()
			if cs.stats.PackedIndices {
				row.Indices = sparcml.IndexPacked.String()
			}
		}
	}
	return row, nil
}

// predicted is the model's prediction from the nonzero counts alone (what
// AlgoAuto sees) of the bytes a rank sends, the largest over ranks like
// the measurement, and of the time in microseconds, for the algorithm and
// index wire that ran (the counts exchange left out).
func predicted[T sparcml.Float](c *sparcml.Comm, cfg *benchConfig, stats sparcml.SparseStats, n int, inputs []*sparcml.SparseVector[T]) (bytes int64, us float64) {
	p, algo, m := c.Size(), stats.Algo, c.CostModel()
	vs := collectives.DTypeOf[T]().Size() * cfg.block // a row's values under --block
	if algo == sparcml.AlgoRing || algo == sparcml.AlgoRabenseifner || algo == sparcml.AlgoRecursiveDoubling {
		for r := 0; r < p; r++ {
			bytes = max(bytes, collectives.AllreduceBytesSent(algo, n, vs, p, r))
		}
		secs, _ := m.PredictAllreduce(algo, n*vs, p)
		return bytes, secs * 1e6
	}
	nnz := make([]int, p)
	for r, v := range inputs {
		nnz[r] = v.NNZ()
	}
	pred := m.PredictSparseQuant(algo, p, n, vs, cfg.quant, nnz)
	if cfg.quant == sparcml.QuantNone && stats.PackedIndices {
		pred = m.PredictSparsePacked(algo, p, n, vs, nnz)
	}
	for _, b := range pred.BytesSent {
		bytes = max(bytes, b)
	}
	if math.IsInf(pred.Seconds, 0) {
		// AlgoHierarchical, which this model does not price: no figure
		// (JSON has no infinity).
		return bytes, 0
	}
	return bytes, pred.Seconds * 1e6
}

// isSparseAlgo says whether a is one of the sparse schedules (not the
// dense end of the switch, not AlgoDirect).
func isSparseAlgo(a sparcml.Algo) bool {
	switch a {
	case sparcml.AlgoSSARRecursiveDoubling, sparcml.AlgoSSARSplitAllgather, sparcml.AlgoDSAR, sparcml.AlgoSparseAllgather:
		return true
	}
	return false
}

// denseOfSparse times the dense allreduce of this rank's sparse input,
// densified, under the model's choice of algorithm, and with --check
// verifies it against ref, the sparse allreduce's dense result.
func denseOfSparse[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, in *sparcml.SparseVector[T], ref []T, tol float64) ([]result, error) {
	dcfg := *cfg
	dcfg.op, dcfg.algo, dcfg.algoName = "allreduce", sparcml.AlgoAuto, "auto"
	op := &allreduceBench[T]{cfg: &dcfg, c: c, data: in.ToDense(nil), ref: ref, tol: tol, sz: int64(collectives.DTypeOf[T]().Size())}
	if cfg.check {
		op.input = slices.Clone(op.data)
	}
	return measure[T](ctx, c, &dcfg, op)
}

// countWrongSparse perturbs the first inject elements of got, then
// returns how many differ from want (every element counts when the
// dimensions differ).
func countWrongSparse[T sparcml.Float](got []T, want *sparcml.SparseVector[T], inject int) int64 {
	for i := range min(inject, len(got)) {
		got[i]++
	}
	if len(got) != want.Dim {
		return int64(max(len(got), want.Dim))
	}
	if want.Dense {
		return countWrong(got, want.Values, 0, 0)
	}
	var wrong int64
	k := 0
	for i, x := range got {
		w := T(0)
		if k < len(want.Indices) && int(want.Indices[k]) == i {
			w = want.Values[k]
			k++
		}
		if x != w {
			wrong++
		}
	}
	return wrong
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
func (s sparseSized) verify(int) int64                              { return 0 }
func (s sparseSized) size() (n int, bytes int64, busFactor float64) { return s.n, s.bytes, 1 }
