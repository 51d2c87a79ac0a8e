package collectives

import (
	"math"

	"github.com/sparcml/sparcml/quant"
)

// The choice among the sparse allreduce algorithms and the dense end of
// the switch: the model's predictions (costmodel_sparse.go) decide, within
// two thresholds, rdFitsSparse and denseUnionFraction, where the per-byte
// charges are known to understate what an algorithm costs. Each threshold
// names the scripts/perf.sh runs that justify it; their figures are in
// docs/DEFAULTS.md, "Recursive doubling threshold", and
// docs/ALGORITHMS-sparse.md, "How AlgoAuto chooses".

// ChooseSparse returns the sparse allreduce algorithm predicted fastest,
// each with the better of raw indices (PredictSparse) and packed ones
// (PredictSparsePacked); ties go to the one with fewer messages. It depends only on its
// arguments, which SparseAllreduce first makes identical on every rank,
// so every rank chooses the same.
func (m CostModel) ChooseSparse(p, dim, valueSize int, nnz []int) Algo {
	return m.chooseSparse(p, dim, spWireFor(valueSize, quant.None), nnz)
}

func (m CostModel) chooseSparse(p, dim int, w spWire, nnz []int) Algo {
	return m.chooseSparseWire(p, dim, w, nnz).algo
}

// spChoice is a choice of the model: the algorithm, the wire it sends
// on, and its prediction (for a sparse algorithm; the dense end of the
// switch has only its time).
type spChoice struct {
	algo    Algo
	wire    spWire
	pred    SparsePrediction
	seconds float64
}

// chooseSparseWire is chooseSparse over the pairs of an algorithm and a
// wire (spWires: raw or packed indices with exact values), and returns
// the pair with its prediction.
func (m CostModel) chooseSparseWire(p, dim int, w spWire, nnz []int) spChoice {
	best := spChoice{algo: AlgoSSARSplitAllgather, wire: w, seconds: math.Inf(1)}
	for _, a := range sparseAlgos {
		if a == AlgoSSARRecursiveDoubling && !rdFitsSparse(dim, nnz) {
			continue
		}
		best = m.bestWire(best, a, p, dim, w, nnz)
	}
	return best
}

// bestWire is best, or algorithm a on the faster of its wires if that is
// predicted faster.
func (m CostModel) bestWire(best spChoice, a Algo, p, dim int, w spWire, nnz []int) spChoice {
	for _, cw := range m.spWires(w) {
		if pr := spPredict(m, a, p, dim, cw, newSpUniform(nnz, dim), nil); pr.Seconds < best.seconds {
			best = spChoice{algo: a, wire: cw, pred: pr, seconds: pr.Seconds}
		}
	}
	return best
}

// spWires are the wires an exact call can use, raw indices first (ties
// keep them): raw, and packed at m's index codec speed. A lossy wire
// compresses its indices always and is the only candidate.
func (m CostModel) spWires(w spWire) []spWire {
	if w.lossy() {
		return []spWire{w}
	}
	return []spWire{w, w.packedWith(m)}
}

// chooseWire is the faster of spWires for sparse algorithm a.
func (m CostModel) chooseWire(a Algo, p, dim int, w spWire, nnz []int) spWire {
	return m.bestWire(spChoice{wire: w, seconds: math.Inf(1)}, a, p, dim, w, nnz).wire
}

// ChooseSparseIndices returns how exact sparse algorithm a should send its
// indices on p ranks for a dimension-dim vector of valueSize-byte values
// when rank r brings nnz[r] entries: IndexPacked when the bytes packing
// saves, at Beta per byte, outweigh the index codec's time (IndexCodec),
// IndexRaw otherwise. It is SparseAllreduce's choice under IndexAuto.
func (m CostModel) ChooseSparseIndices(a Algo, p, dim, valueSize int, nnz []int) IndexWire {
	if m.chooseWire(a, p, dim, spWireFor(valueSize, quant.None), nnz).packed {
		return IndexPacked
	}
	return IndexRaw
}

// rdFitsSparse says whether SSAR recursive doubling is worth considering:
// its partial results grow towards the union of every rank's support and
// each round merges them whole, one round after the other, where the
// split algorithms handle each range once and post their messages
// together. It only pays while there are few entries in all, where its
// fewer messages matter more than its bytes and merges, and they are a
// small part of the dimension (SparCML: P k c << n). Past either bound it
// ran behind ssar-split by more than the model's per-byte charges say,
// so the model is not asked. Benchmarks: scripts/perf.sh forces every
// algorithm on 4 ranks at 1% each (a 32nd of the dimension in all), and
// sparcml bench --op sparse-allreduce --sizes 16M --algo ssar-rd|ssar-split
// at 0.005% to 0.1% on 4 and 8 ranks, local and on the emulated cluster
// (docs/DEFAULTS.md, "Recursive doubling threshold", gives the
// crossover).
func rdFitsSparse(dim int, nnz []int) bool {
	total := 0
	for _, k := range nnz {
		total += k
	}
	return total <= min(dim/32, rdMaxEntries)
}

// rdMaxEntries bounds the entries of all ranks together that SSAR
// recursive doubling is considered for (rdFitsSparse).
const rdMaxEntries = 8192

// ChooseSparseOrDense is ChooseSparse with the dense allreduce of the
// densified vectors as one more candidate: when the inputs are dense
// enough that even the best sparse schedule (fill-in, merges, the switch
// to dense on the way) costs more than moving the whole vector, it returns
// the dense algorithm the model picks for dim values (AlgoRing,
// AlgoRabenseifner or AlgoRecursiveDoubling).
func (m CostModel) ChooseSparseOrDense(p, dim, valueSize int, nnz []int) Algo {
	return m.chooseSparseOrDense(p, dim, spWireFor(valueSize, quant.None), nnz)
}

// ChooseSparseOrDenseQuant is ChooseSparseOrDense for values sent in
// codec kind: the sparse candidates are priced at their encoded sizes
// (AlgoSSARRecursiveDoubling excluded under a lossy kind), the dense end
// at full precision, which is what SparseAllreduce runs there.
func (m CostModel) ChooseSparseOrDenseQuant(p, dim, valueSize int, kind quant.Kind, nnz []int) Algo {
	return m.chooseSparseOrDense(p, dim, spWireFor(valueSize, kind), nnz)
}

func (m CostModel) chooseSparseOrDense(p, dim int, w spWire, nnz []int) Algo {
	return m.chooseSparseOrDenseWire(p, dim, w, nnz).algo
}

// chooseSparseOrDenseWire is chooseSparseOrDense with the wire and the
// prediction of its choice (SparseAllreduce reports the prediction, and
// sends on the wire unless SparseOptions.Indices forces one).
func (m CostModel) chooseSparseOrDenseWire(p, dim int, w spWire, nnz []int) spChoice {
	bytes := dim * w.s
	denseAlgo := m.ChooseAllreduce(bytes, p)
	dense := spChoice{algo: denseAlgo, wire: w, seconds: m.allreduceTime(denseAlgo, bytes, p) + float64(bytes)*m.Gamma} // + densifying the input
	if expectedUnion(dim, nnz) >= denseUnionFraction {
		// Only the split schedules still compete: DSAR, whose result is
		// dense by design and whose last phase moves dense blocks in
		// place, and ssar-split, whose owners each reduce one range and
		// whose allgather moves the ranges once, in the smaller form
		// (with a lossy codec quantized, a fraction of the exact dense
		// vector the dense end moves). Recursive doubling and the
		// allgather would push nearly dense partial results or inputs
		// through encode, decode and merges at every rank. With many
		// ranks on a small vector ssar-split's one latency for its
		// scatter beats both DSAR's and the dense algorithms' P-1 or
		// 2 log2 P: at 256 ranks, 1% of 64K, 0.73x Rabenseifner
		// (TestAutoChoiceAt256, sparcml sim).
		best := m.bestWire(dense, AlgoDSAR, p, dim, w, nnz)
		return m.bestWire(best, AlgoSSARSplitAllgather, p, dim, w, nnz)
	}
	if sparse := m.chooseSparseWire(p, dim, w, nnz); sparse.seconds <= dense.seconds {
		return sparse
	}
	return dense
}

// denseUnionFraction: when the sum is expected to fill more than half of
// the dimension, only the dense allreduce and the split schedules are
// considered. Recursive doubling and the allgather then move nearly dense
// partial results through encode, decode and merge passes that the dense
// algorithms do not have, and lose to the dense allreduce by more than
// the model predicts; DSAR,
// whose owners add into the dense output and whose allgather moves dense
// blocks in place, beats it. Benchmarks: scripts/perf.sh forces every
// algorithm on 8 ranks at 10% per rank (a union of 57%; sparcml bench
// --op sparse-allreduce --density 0.1 --algo A), and scripts/cpu-per-op.sh
// counts the CPU each one costs. Below half the model decides: on 4 hosts
// at 10% (a union of 34%) on the emulated cluster at 1 Gbit/s ssar-split
// takes about 0.6x DSAR's time, as the model predicts, and on loopback
// the model still picks DSAR there (docs/ALGORITHMS-sparse.md, "How
// AlgoAuto chooses").
const denseUnionFraction = 0.5

// expectedUnion is the expected fraction of the dimension covered by the
// union of independent uniformly spread supports of nnz[r] entries.
func expectedUnion(dim int, nnz []int) float64 {
	if dim == 0 {
		return 0
	}
	empty := 1.0
	for _, k := range nnz {
		empty *= 1 - math.Min(1, float64(k)/float64(dim))
	}
	return 1 - empty
}
