// Package simrun runs one case of a collective over the simulated network
// of transport/sim: every rank's seeded input, the collective itself (the
// library's own code), the check against the sum computed locally, and
// what `sparcml sim` reports. Adding a collective is adding an Op to Ops.
package simrun

import (
	"context"
	"fmt"
	"slices"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/transport/sim"
)

// Case is one simulated call.
type Case struct {
	Op      string
	N       int     // elements
	Density float64 // sparse ops: nonzeros per rank, as a fraction of N
	Dist    string  // sparse ops: uniform or powerlaw
	Algo    collectives.Algo
	Quant   quant.Kind
	Indices collectives.IndexWire // exact sparse values: how indices travel (IndexAuto: the model's choice)
	Seed    uint64
	Model   collectives.CostModel // AlgoAuto's model and the predictions
	Scope   compress.Scope        // compress: union or global
	Select  compress.Method       // compress: the local selection

	topo *collectives.Topology // the simulated hosts (set by Run)
	// keep holds every rank's result until the check (set by Run when
	// checking): otherwise a rank's result is dropped when it returns,
	// so that P results of n entries are not all held at the end.
	keep bool
}

// Op is a collective `sparcml sim` can run.
type Op interface {
	// Algos are the algorithms it accepts on topology, AlgoAuto first
	// (the hierarchical ones need hosts: not on sim.Flat).
	Algos(topology sim.Topology) []collectives.Algo
	// Prepare makes every rank's input for c on p ranks.
	Prepare(c Case, p int) (Instance, error)
}

// Instance is one prepared call of an Op.
type Instance interface {
	// Run runs the call as rank on op (from the rank's simulated
	// goroutine) and returns the algorithm that ran.
	Run(op *collectives.Op, rank int) (collectives.Algo, error)
	// Wrong counts the result elements, over every rank, that differ
	// from the reference computed locally from every rank's input.
	Wrong() int64
	// Predict is the cost model's time and bytes sent by every rank for
	// the algorithm that ran, after Run.
	Predict(algo collectives.Algo) (seconds float64, bytesPerRank []int64)
}

// Ops are the collectives by name.
var Ops = map[string]Op{
	"allreduce":        denseAllreduce{},
	"sparse-allreduce": sparseAllreduce{},
	"compress":         compressReduce{},
}

// OpNames lists Ops in order.
func OpNames() []string {
	var names []string
	for n := range Ops {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Result is what one simulated call did.
type Result struct {
	P            int
	Algo         collectives.Algo // the algorithm that ran (auto's choice)
	Seconds      float64          // virtual time from the call's start to the last rank's return
	BytesSent    []int64          // payload bytes every rank sent
	Busiest      sim.Link
	Predicted    float64 // the cost model's seconds for Algo
	PredictedB   []int64 // and its bytes per rank
	Wrong        int64   // -1 when not checked
	Errors       []error // per rank, nil entries when fine
	WallSeconds  float64
	MaxBytesSent int64
	// Compress: K, the entries selected over every rank and the entries
	// of the result (zero for the other ops).
	K, Kept  int
	Selected int64
}

// Run simulates c on the machine cfg. The check runs when check is set.
func Run(cfg sim.Config, c Case, check bool) (Result, error) {
	op, ok := Ops[c.Op]
	if !ok {
		return Result{}, fmt.Errorf("unknown op %q", c.Op)
	}
	if cfg.Compute.Gamma == 0 {
		cfg.Compute.Gamma = c.Model.Gamma
	}
	if cfg.Compute.SparseGamma == 0 {
		cfg.Compute.SparseGamma = c.Model.SparseGammaOrDefault()
	}
	w, err := sim.New(cfg)
	if err != nil {
		return Result{}, err
	}
	cfg = w.Config()
	var topo *collectives.Topology
	if cfg.Topology != sim.Flat {
		hosts := make([]int, cfg.Ranks)
		for r := range hosts {
			hosts[r] = r / cfg.RanksPerHost
		}
		topo = &collectives.Topology{Hosts: hosts}
	}
	c.topo, c.keep = topo, check
	inst, err := op.Prepare(c, cfg.Ranks)
	if err != nil {
		return Result{}, err
	}
	p := cfg.Ranks
	res := Result{P: p, Errors: make([]error, p), BytesSent: make([]int64, p), Wrong: -1}
	algos := make([]collectives.Algo, p)
	pools := rankPools(p, cfg.Compute.Mode == sim.ComputeMeasured)
	seq := uint64(0)
	call := func() ([]float64, error) {
		seq++
		return w.Run(func(t *sim.Transport) {
			r := t.Rank()
			o := &collectives.Op{Ctx: context.Background(), T: t, Comm: 1, Seq: seq, Pool: pools[r], Topo: topo}
			algos[r], res.Errors[r] = inst.Run(o, r)
		})
	}
	if cfg.Compute.Mode == sim.ComputeMeasured {
		// Measured CPU time is of a warm call, as bench times one after
		// its warm-up: buffers pooled, the heap grown.
		if _, err := call(); err != nil {
			return res, err
		}
		w.ResetCounters()
	}
	before := make([]int64, p)
	for r := range p {
		before[r] = int64(w.Transport(r).Stats().BytesSent)
	}
	start := w.Now()
	ends, err := call()
	if err != nil {
		return res, err
	}
	for r := range p {
		if res.Errors[r] != nil {
			return res, fmt.Errorf("rank %d: %w", r, res.Errors[r])
		}
		res.Seconds = max(res.Seconds, ends[r]-start)
		res.BytesSent[r] = int64(w.Transport(r).Stats().BytesSent) - before[r]
		res.MaxBytesSent = max(res.MaxBytesSent, res.BytesSent[r])
	}
	res.Algo = algos[0]
	res.Busiest = w.Busiest()
	res.Predicted, res.PredictedB = inst.Predict(res.Algo)
	if z, ok := inst.(*compressInstance); ok {
		res.K, res.Selected, res.Kept = z.Compressed()
	}
	if check {
		res.Wrong = inst.Wrong()
	}
	return res, nil
}

// rankPools are the ranks' pools of free buffers: one each when warm
// calls are measured (each rank keeps its own between calls, as on a
// real transport), else one shared by every rank. A rank's pool keeps up
// to 32 free buffers after its call, and one each would hold P times
// that until the last rank returns; shared, a buffer a rank frees serves
// the next rank's receive (docs/SIMULATION.md, Limits).
func rankPools(p int, own bool) []*collectives.Buffers {
	pools := make([]*collectives.Buffers, p)
	shared := &collectives.Buffers{}
	for r := range pools {
		pools[r] = shared
		if own {
			pools[r] = &collectives.Buffers{}
		}
	}
	return pools
}
