package collectives

import (
	"fmt"

	"github.com/sparcml/sparcml/quant"
)

// SparsePlan is what a SparseAllreduce decided from its counts exchange
// (AlgoAuto or Balanced): the algorithm, how exact values' indices
// travel, and the split algorithms' ranges. It follows from what every
// rank sent in the exchange alone, so it is the same on every rank.
//
// Passed back in SparseOptions.Plan to a later call with the same
// dimension, value type and options, it runs that call on the same
// decisions without the exchange, saving its message rounds,
// the synchronisation of every rank they amount to, and the model's
// choice, which weigh most on short operations (docs/PERFORMANCE.md,
// "Auto against the best forced algorithm": sparcml bench --algo
// auto,auto-tensor). The public API's
// communicators keep each plan of a named tensor (sparcml.WithTensor) for
// SPARCML_SPARSE_AGREE_EVERY calls. A plan gives the right sum for any
// inputs; it is as fast as the inputs it was made from are like the new
// ones.
type SparsePlan struct {
	algo   Algo
	packed bool  // exact values with packed indices
	bounds []int // of the split algorithms, nil for the others
	key    spPlanKey
}

// spPlanKey is what a plan was made for: a call may reuse it only with
// the same.
type spPlanKey struct {
	dim, valueSize int
	reduce         ReduceOp
	algo           Algo
	balanced       bool
	quant          quant.Kind
	indices        IndexWire
}

func spKeyOf(dim, entrySize int, opts SparseOptions) spPlanKey {
	return spPlanKey{dim: dim, valueSize: entrySize, reduce: opts.Reduce, algo: opts.Algo,
		balanced: opts.Balanced, quant: opts.Quant, indices: opts.Indices}
}

// Algo is the algorithm the plan runs.
func (p *SparsePlan) Algo() Algo { return p.algo }

func (k spPlanKey) String() string {
	return fmt.Sprintf("dimension %d, %d-byte entries, reduce %v, algo %v, balanced %v, quant %v, indices %v",
		k.dim, k.valueSize, k.reduce, k.algo, k.balanced, k.quant, k.indices)
}

// spAgrees says whether a call with opts exchanges counts: AlgoAuto
// chooses from them, Balanced places ranges from their samples.
func spAgrees(opts SparseOptions) bool { return opts.Algo == AlgoAuto || opts.Balanced }

// decide makes the plan of a call: opts.Plan's when given, else from a
// counts exchange (AlgoAuto or Balanced), else from opts alone for a
// forced algorithm, whose ranges are equal and whose index wire this rank
// chooses from its own count. It fills st's Algo, Agreed, TotalNNZIn,
// predictions, Plan and Reused.
func (c *spCall[T]) decide(opts SparseOptions, st *SparseStats) (*SparsePlan, error) {
	key := spKeyOf(c.in.Dim, c.es, opts)
	wire := spWireOfVector(c.in, opts.Quant)
	switch {
	case opts.Plan != nil:
		if opts.Plan.key != key {
			return nil, sparseFailInvalid(c.op, "a plan made for %v, passed to a call with %v", opts.Plan.key, key)
		}
		st.Reused = true
		return opts.Plan, nil
	case spAgrees(opts):
		ag, err := c.agree(opts)
		if err != nil {
			return nil, err
		}
		pl := c.decideAgreed(opts, ag, wire, st)
		c.useCarried(ag, pl)
		if c.carried != nil {
			// The scatter's round went with the exchange's.
			st.PredictedSeconds -= opts.Model.latency()
		}
		pl.key = key
		st.Agreed, st.TotalNNZIn, st.Plan = true, ag.total(), pl
		return pl, nil
	default:
		wire = spChooseWire(opts.Model, opts, opts.Algo, c.p, c.in.Dim, c.in.NNZ(), wire, nil)
		pl := &SparsePlan{algo: opts.Algo, packed: wire.packed, key: key}
		if isSplitAlgo(opts.Algo) {
			pl.bounds = spEqualBounds(c.in.Dim, c.p)
		}
		return pl, nil
	}
}

// decideAgreed makes the plan of a call from the agreed counts and
// samples: AlgoAuto's choice of algorithm and wire (or the forced
// algorithm's wire), its predictions in st, and its ranges.
func (c *spCall[T]) decideAgreed(opts SparseOptions, ag *spAgreement, wire spWire, st *SparseStats) *SparsePlan {
	algo, pred := opts.Algo, SparsePrediction{}
	if algo == AlgoAuto {
		ch := opts.Model.chooseSparseOrDenseWire(c.p, c.in.Dim, wire, ag.nnz)
		algo, pred = ch.algo, ch.pred
		if opts.Indices == IndexAuto {
			wire = ch.wire // the choice's, as spChooseWire would resolve it
		}
	}
	if opts.Algo != AlgoAuto || opts.Indices != IndexAuto {
		wire = spChooseWire(opts.Model, opts, algo, c.p, c.in.Dim, c.in.NNZ(), wire, ag.nnz)
		pred = SparsePrediction{}
	}
	c.predict(st, opts.Model, algo, wire, ag, pred)
	pl := &SparsePlan{algo: algo, packed: wire.packed}
	if isSplitAlgo(algo) {
		pl.bounds = splitBounds(algo, opts, ag, c.in.Dim, c.p)
	}
	return pl
}

// predict fills st's predictions for algo over wire, counts exchange
// included, from the agreed counts: pred when the choice made it, else
// computed here.
func (c *spCall[T]) predict(st *SparseStats, m CostModel, algo Algo, wire spWire, ag *spAgreement, pred SparsePrediction) {
	if isAllreduceAlgo(algo) {
		secs, bytes := m.PredictAllreduce(algo, c.in.Dim*c.es, c.p)
		st.PredictedBytes = bytes + ag.bytesSent[c.rank]
		st.PredictedSeconds = secs + ag.seconds
		return
	}
	if pred.BytesSent == nil {
		pred = spPredict(m, algo, c.p, c.in.Dim, wire, newSpUniform(ag.nnz, c.in.Dim), nil)
	}
	st.PredictedBytes = pred.BytesSent[c.rank] + ag.bytesSent[c.rank]
	st.PredictedSeconds = pred.Seconds + ag.seconds
}

func isSplitAlgo(a Algo) bool { return a == AlgoSSARSplitAllgather || a == AlgoDSAR }

// splitBounds are the index ranges split algorithm algo runs on: balanced
// (ag.balancedBounds) when opts ask for them, and under AlgoAuto for
// ssar-split where the samples show the equal ranges skewed
// (ag.equalRangesSkewed); equal otherwise. On a skewed support the owner
// of a popular equal range receives most of every rank's entries and sets
// ssar-split's time, and balanced ranges make each owner's share the 1/P
// the model prices; on a uniform one the equal ranges already are, and
// balanced ones would only add the samples' noise. DSAR keeps equal
// ranges unless asked: its last phase allgathers the ranges dense, so the
// longest one sets its time.
// Benchmark: sparcml bench --op sparse-allreduce --dist powerlaw --algo
// ssar-split,allgather,dsar,auto with and without --balanced on the
// emulated cluster (docs/DEFAULTS.md, "Balanced ranges on a power-law
// support"); sparcml sim at 128 and 256 ranks (docs/SIMULATION.md).
func splitBounds(algo Algo, opts SparseOptions, ag *spAgreement, dim, p int) []int {
	if opts.Balanced || (opts.Algo == AlgoAuto && algo == AlgoSSARSplitAllgather && ag.equalRangesSkewed(dim, p)) {
		return ag.balancedBounds(dim, p)
	}
	return spEqualBounds(dim, p)
}
