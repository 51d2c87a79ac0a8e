package simrun

import (
	"fmt"
	"math"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/transport/sim"
)

// compressReduce is the Compressor's whole reduction (what
// sparcml.Compressor.Reduce runs on each rank, and `sparcml bench --op
// compress` times): the seeded gradient (CompressGradient) accumulated
// into the rank's residual and its top Density·N selected (Case.Select),
// then with Case.Scope union the average of every selected entry
// (SparseAllreduce, Case.Algo), with global Ok-Topk's global top-k
// (GlobalTopk, K = the selection's k) and the dropped entries put back
// into the residual. One call is step 0: the global scope's first call
// is an exact one. The selection is charged in virtual time as one dense
// pass over the gradient (KernelReduce); with sim.ComputeMeasured as the
// CPU time it took.
type compressReduce struct{}

func (compressReduce) Algos(sim.Topology) []collectives.Algo {
	return []collectives.Algo{collectives.AlgoAuto, collectives.AlgoSSARRecursiveDoubling,
		collectives.AlgoSSARSplitAllgather, collectives.AlgoDSAR, collectives.AlgoSparseAllgather}
}

type compressInstance struct {
	c       Case
	p       int
	sends   []*sparse.Vector[float32] // each rank's selection, as sent
	outs    []*sparse.Vector[float32]
	resids  [][]float32 // each rank's residual after the call
	sparse  []collectives.SparseStats
	global  []collectives.GlobalTopkStats
	k       int
	selects int64 // entries selected, summed over the ranks
}

func (compressReduce) Prepare(c Case, p int) (Instance, error) {
	if c.N < 1 || !(c.Density > 0) || c.Density > 1 {
		return nil, fmt.Errorf("compress of %d elements at density %v", c.N, c.Density)
	}
	if c.Scope == compress.ScopeGlobal && c.Algo != collectives.AlgoAuto {
		return nil, fmt.Errorf("the global scope has one algorithm; --algo applies to the union")
	}
	return &compressInstance{c: c, p: p, sends: make([]*sparse.Vector[float32], p), outs: make([]*sparse.Vector[float32], p),
		resids: make([][]float32, p), sparse: make([]collectives.SparseStats, p), global: make([]collectives.GlobalTopkStats, p)}, nil
}

func (z *compressInstance) sparsify() compress.Config {
	return compress.Config{Density: z.c.Density, Method: z.c.Select, Seed: z.c.Seed}
}

func (z *compressInstance) Run(op *collectives.Op, rank int) (collectives.Algo, error) {
	sp, err := compress.NewSparsifier[float32](z.c.N, z.sparsify())
	if err != nil {
		return 0, err
	}
	grad := make([]float32, z.c.N)
	CompressGradient(grad, z.c.Seed, 0, rank)
	send, out := &sparse.Vector[float32]{}, &sparse.Vector[float32]{}
	info, err := sp.Step(grad, send)
	if err != nil {
		return 0, err
	}
	grad = nil // the residual holds it now
	transport.Work(op.T, transport.KernelReduce, 4*z.c.N)
	z.sends[rank], z.outs[rank], z.k = send, out, info.K
	z.selects += int64(info.Selected) // one goroutine runs at a time
	algo := collectives.AlgoSSARSplitAllgather
	if z.c.Scope == compress.ScopeUnion {
		z.sparse[rank], err = collectives.SparseAllreduce(op, send, out, z.unionOpts(rank))
		algo = z.sparse[rank].Algo
	} else {
		var dropped sparse.Vector[float32]
		z.global[rank], err = collectives.GlobalTopk(op, send, out, &dropped, &collectives.GlobalTopkState{}, collectives.GlobalTopkOptions{
			K: info.K, Reduce: collectives.Avg, Quant: z.c.Quant, QuantSeed: z.c.Seed ^ uint64(rank+1), Model: z.c.Model})
		if err == nil {
			err = sp.Restore(&dropped)
		}
	}
	if z.c.keep {
		z.resids[rank] = sp.Residual()
	} else {
		z.outs[rank] = nil
	}
	return algo, err
}

func (z *compressInstance) unionOpts(rank int) collectives.SparseOptions {
	return collectives.SparseOptions{Algo: z.c.Algo, Reduce: collectives.Avg, Model: z.c.Model, Quant: z.c.Quant, Indices: z.c.Indices,
		QuantSeed: z.c.Seed ^ uint64(rank+1)}
}

// Wrong compares every rank's result and residual with the reference
// `sparcml bench --op compress --check` uses (CompressReference).
func (z *compressInstance) Wrong() int64 {
	all := int64(z.c.N) * int64(z.p) * 2
	if z.c.Quant != quant.None {
		return all // refused by Check: the reference is exact
	}
	ref, err := NewCompressReference[float32](z.p, z.c.N, z.sparsify(), z.c.Scope)
	if err != nil || ref.Step(z.c.Seed, 0, z.global[0]) != nil {
		return all
	}
	var wrong int64
	got := make([]float32, z.c.N)
	for r := range z.p {
		wrong += countDiff(z.outs[r].ToDense(got), ref.Want())
		wrong += countDiff(z.resids[r], ref.Residual(r))
	}
	return wrong
}

func countDiff(got, want []float32) int64 {
	if len(got) != len(want) {
		return int64(max(len(got), len(want)))
	}
	var n int64
	for i := range got {
		if got[i] != want[i] {
			n++
		}
	}
	return n
}

// Predict is the cost model's exact prediction for the union's sparse
// allreduce of the selections; the global scope has none.
func (z *compressInstance) Predict(algo collectives.Algo) (float64, []int64) {
	if z.c.Scope != compress.ScopeUnion {
		return math.Inf(1), nil
	}
	pred := collectives.PredictSparseExact(z.c.Model, algo, z.sends, z.unionOpts(0), z.sparse[0].Bounds)
	return pred.Seconds, pred.BytesSent
}

// Compressed is what a compress call kept: K, the entries every rank
// selected in all, and the entries of the result.
func (z *compressInstance) Compressed() (k int, selected int64, kept int) {
	if z.c.Scope == compress.ScopeUnion {
		return z.k, z.selects, z.sparse[0].NNZOut
	}
	return z.k, z.selects, z.global[0].Kept
}
