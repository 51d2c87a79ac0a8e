package collectives_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// spBench runs SparseAllreduce b.N times on p in-memory ranks and reports,
// per operation: the most bytes any rank sent ("sent-B/rank") and received
// ("recv-B/rank", the hot spot of a split), the exact prediction of the
// first ("pred-B/rank"), the model's estimate ("model-B/rank") and the
// process's CPU time divided among the ranks ("cpu-ms/rank").
func spBench[T collectives.Float](b *testing.B, in []*sparse.Vector[T], opts collectives.SparseOptions) {
	p := len(in)
	ts := transport.NewInMemory(p)
	defer func() {
		for _, t := range ts {
			t.Close()
		}
	}()
	pools := make([]*collectives.Buffers, p)
	outs := make([]*sparse.Vector[T], p)
	for r := range p {
		pools[r], outs[r] = &collectives.Buffers{}, &sparse.Vector[T]{}
	}
	var stats collectives.SparseStats
	run := func(seq uint64) {
		var wg sync.WaitGroup
		errs := make([]error, p)
		for r := range p {
			wg.Add(1)
			go func() {
				defer wg.Done()
				op := &collectives.Op{Ctx: context.Background(), T: ts[r], Comm: 1, Seq: seq, Pool: pools[r]}
				o := opts
				o.QuantSeed = opts.QuantSeed + seq<<8 + uint64(r) // per rank and call
				st, err := collectives.SparseAllreduce(op, in[r], outs[r], o)
				errs[r] = err
				if r == 0 {
					stats = st
				}
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	run(1) // warm the pools
	before := make([]transport.Stats, p)
	for r, t := range ts {
		before[r] = t.Stats()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	seq := uint64(2)
	for b.Loop() {
		run(seq)
		seq++
	}
	b.StopTimer()
	n := float64(seq - 2)
	b.ReportMetric((processCPU()-cpu0).Seconds()*1e3/n/float64(p), "cpu-ms/rank")
	var sent, recv float64
	for r, t := range ts {
		d := t.Stats().Sub(before[r])
		sent = max(sent, float64(d.BytesSent)/n)
		recv = max(recv, float64(d.BytesRecv)/n)
	}
	pred := collectives.PredictSparseExact(collectives.DefaultCostModel, stats.Algo, in, opts, stats.Bounds)
	nnz := make([]int, p)
	for r, v := range in {
		nnz[r] = v.NNZ()
	}
	model := collectives.DefaultCostModel.PredictSparseQuant(stats.Algo, p, in[0].Dim, sparse.ValueSize[T](), opts.Quant, nnz)
	b.ReportMetric(sent, "sent-B/rank")
	b.ReportMetric(recv, "recv-B/rank")
	b.ReportMetric(float64(slices.Max(pred.BytesSent)), "pred-B/rank")
	b.ReportMetric(float64(slices.Max(model.BytesSent)), "model-B/rank")
}

// processCPU is the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// spBenchInputs: p ranks, dimension dim, each with nnz entries spread
// uniformly, or on a power law (most near index 0) when skewed.
func spBenchInputs(p, dim, nnz int, skewed bool) []*sparse.Vector[float32] {
	rng := rand.New(rand.NewPCG(42, uint64(nnz)))
	in := make([]*sparse.Vector[float32], p)
	for r := range in {
		seen := map[uint32]bool{}
		var idx []uint32
		for len(idx) < nnz {
			x := uint32(rng.IntN(dim))
			if skewed {
				x = uint32(float64(dim) * math.Pow(rng.Float64(), 4))
			}
			if !seen[x] {
				seen[x] = true
				idx = append(idx, x)
			}
		}
		slices.Sort(idx)
		vals := make([]float32, nnz)
		for i := range vals {
			vals[i] = rng.Float32()
		}
		in[r] = &sparse.Vector[float32]{Dim: dim, Indices: idx, Values: vals}
	}
	return in
}

var spBenchAlgos = []collectives.Algo{
	collectives.AlgoSSARRecursiveDoubling, collectives.AlgoSSARSplitAllgather,
	collectives.AlgoDSAR, collectives.AlgoSparseAllgather, collectives.AlgoAuto,
}

// BenchmarkSparseAllreduce: every algorithm on 8 ranks, dimension 2^20,
// at 0.1%, 1% and 10% density per rank.
func BenchmarkSparseAllreduce(b *testing.B) {
	const p, dim = 8, 1 << 20
	for _, density := range []float64{0.001, 0.01, 0.1} {
		in := spBenchInputs(p, dim, int(density*dim), false)
		for _, a := range spBenchAlgos {
			b.Run(fmt.Sprintf("density=%g/%v", density, a), func(b *testing.B) {
				spBench(b, in, collectives.SparseOptions{Algo: a})
			})
		}
	}
}

// BenchmarkSparseAllreduceLarge: every sparse algorithm on 4 ranks at the
// size of the cluster benchmark, dimension 2^24, at 0.1% and 1% per rank.
func BenchmarkSparseAllreduceLarge(b *testing.B) {
	const p, dim = 4, 1 << 24
	for _, density := range []float64{0.001, 0.01} {
		in := spBenchInputs(p, dim, int(density*dim), false)
		// Not DSAR: its output is dense, the dense allreduce's figures.
		for _, a := range []collectives.Algo{collectives.AlgoSSARRecursiveDoubling, collectives.AlgoSSARSplitAllgather, collectives.AlgoSparseAllgather} {
			b.Run(fmt.Sprintf("density=%g/%v", density, a), func(b *testing.B) {
				spBench(b, in, collectives.SparseOptions{Algo: a})
			})
		}
	}
}

// BenchmarkSparseBalanced: the split algorithm on a power-law support with
// equal and with balanced ranges; recv-B/rank is the busiest owner.
func BenchmarkSparseBalanced(b *testing.B) {
	const p, dim = 8, 1 << 20
	in := spBenchInputs(p, dim, dim/100, true)
	for _, balanced := range []bool{false, true} {
		b.Run(fmt.Sprintf("balanced=%v", balanced), func(b *testing.B) {
			spBench(b, in, collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather, Balanced: balanced})
		})
	}
}

// BenchmarkSparseVsDense: the dense allreduce (AlgoAuto) of the same
// gradients densified, next to BenchmarkSparseAllreduce's figures: what
// sparsity saves on 8 ranks at dimension 2^20.
func BenchmarkSparseVsDense(b *testing.B) {
	const p, dim = 8, 1 << 20
	ts := transport.NewInMemory(p)
	defer func() {
		for _, t := range ts {
			t.Close()
		}
	}()
	data := make([][]float32, p)
	pools := make([]*collectives.Buffers, p)
	for r := range p {
		data[r], pools[r] = make([]float32, dim), &collectives.Buffers{}
	}
	before := make([]transport.Stats, p)
	for r, t := range ts {
		before[r] = t.Stats()
	}
	seq := uint64(0)
	for b.Loop() {
		seq++
		var wg sync.WaitGroup
		errs := make([]error, p)
		for r := range p {
			wg.Add(1)
			go func() {
				defer wg.Done()
				op := &collectives.Op{Ctx: context.Background(), T: ts[r], Comm: 1, Seq: seq, Pool: pools[r]}
				_, errs[r] = collectives.Allreduce(op, data[r], collectives.Sum, collectives.AlgoAuto, collectives.DefaultCostModel)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	var sent float64
	for r, t := range ts {
		sent = max(sent, float64(t.Stats().Sub(before[r]).BytesSent)/float64(seq))
	}
	b.ReportMetric(sent, "sent-B/rank")
}

// BenchmarkSparseQuantized: the split allreduce and AlgoAuto on 4 ranks,
// dimension 2^24 at 1% density per rank, with exact values, fp16 and q4
// (indices compressed under the lossy kinds): sent-B/rank against ns/op,
// which here (in memory, the codecs pure CPU) shows the codecs' cost.
func BenchmarkSparseQuantized(b *testing.B) {
	const p, dim = 4, 1 << 24
	in := spBenchInputs(p, dim, dim/100, false)
	for _, algo := range []collectives.Algo{collectives.AlgoSSARSplitAllgather, collectives.AlgoAuto} {
		for _, kind := range []quant.Kind{quant.None, quant.FP16, quant.Q4} {
			b.Run(fmt.Sprintf("%v/%v", algo, kind), func(b *testing.B) {
				spBench(b, in, collectives.SparseOptions{Algo: algo, Quant: kind, QuantSeed: 1})
			})
		}
	}
}

// BenchmarkSparseAutoOverhead: what AlgoAuto adds to the algorithm it
// runs, on 8 ranks at 0.1% of 2^24 (where an operation is short enough for
// it to show): ssar-split forced, forced on balanced ranges (the counts
// and samples exchange and the bounds), and AlgoAuto under a model that
// picks ssar-split (the exchange, the bounds and the choice).
func BenchmarkSparseAutoOverhead(b *testing.B) {
	const p, dim = 8, 1 << 24
	in := spBenchInputs(p, dim, dim/1000, false)
	m := collectives.CostModel{Alpha: 20e-6, Beta: 1 / 125e6, Gamma: 1 / 3e9, SparseGamma: 1 / 0.9e9, IndexCodec: 1.5e-9}
	for _, q := range []quant.Kind{quant.None, quant.Q4} {
		for _, o := range []collectives.SparseOptions{
			{Algo: collectives.AlgoSSARSplitAllgather},
			{Algo: collectives.AlgoSSARSplitAllgather, Balanced: true},
			{Algo: collectives.AlgoAuto},
		} {
			o.Model, o.Quant = m, q
			b.Run(fmt.Sprintf("%v/%v/balanced=%v", q, o.Algo, o.Balanced), func(b *testing.B) {
				if a := m.ChooseSparseOrDenseQuant(p, dim, 4, q, spCounts(in)); a != collectives.AlgoSSARSplitAllgather {
					b.Fatalf("the model picks %v, not ssar-split: the case no longer measures the overhead", a)
				}
				spBench(b, in, o)
			})
		}
	}
}

func spCounts[T collectives.Float](in []*sparse.Vector[T]) []int {
	nnz := make([]int, len(in))
	for r, v := range in {
		nnz[r] = v.NNZ()
	}
	return nnz
}

// BenchmarkSparseBlockAllreduce: an embedding gradient of a 2^20 x 64
// table, 1% of rows per rank on a power-law support, on 4 ranks, as
// block vectors (a row, one index) under every sparse algorithm.
func BenchmarkSparseBlockAllreduce(b *testing.B) {
	const p, rows, width = 4, 1 << 20, 64
	idx := spBenchInputs(p, rows, rows/100, true)
	in := make([]*sparse.Vector[float32], p)
	for r, v := range idx {
		in[r] = &sparse.Vector[float32]{Dim: rows, Block: width, Indices: v.Indices, Values: make([]float32, len(v.Indices)*width)}
		for i := range in[r].Values {
			in[r].Values[i] = float32(i%7 + 1)
		}
	}
	for _, a := range []collectives.Algo{collectives.AlgoSSARRecursiveDoubling, collectives.AlgoSSARSplitAllgather,
		collectives.AlgoSparseAllgather, collectives.AlgoAuto} {
		b.Run(a.String(), func(b *testing.B) { spBench(b, in, collectives.SparseOptions{Algo: a}) })
	}
}
