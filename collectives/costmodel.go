package collectives

import (
	"math"
)

// CostModel is the alpha-beta-gamma (Hockney plus reduction) model of a
// collective's time: a message costs Alpha seconds plus Beta seconds per
// byte on the wire, and reducing a byte costs Gamma seconds. It predicts
// each algorithm's time and picks the cheapest. The formulas are
// textbook (Thakur, Rabenseifner and Gropp, IJHPCA 2005) and are listed
// with the algorithms in docs/ALGORITHMS.md.
//
// SparseGamma is the cost of reducing a byte of sparse entries by merging
// sorted (index, value) streams, which is branchy and several times slower
// than a dense add; 0 means sparseMergeFactor times Gamma. Only the sparse
// algorithms use it.
//
// LocalAlpha and LocalBeta are Alpha and Beta between ranks of one host,
// when the job has several (Op.Topo). With them the model weighs the
// hierarchical allreduce against the flat algorithms, whose links it takes
// to be the network's; 0 means not measured, and the hierarchical
// algorithm runs only when asked for by name.
//
// IndexCodec is the cost in seconds of packing one index of an exact
// sparse message losslessly and unpacking it on the other side
// (SparseOptions.Indices); 0 means defaultIndexCodec. Packing saves
// bytes on the wire at that price, so the model packs where Beta is
// large (a slow network) and keeps the raw indices where it is small.
//
// Latency is the part of Alpha that messages posted together overlap:
// the time a message's head takes to cross the network (LogGP L), where
// the rest of Alpha is CPU spent per message at its two ends (2o). The
// sparse schedules that post a message to every other rank at once (the
// scatter to owners) then cost one Latency per round plus Alpha-Latency
// per message, not Alpha per message. 0 means not known: every message
// costs a full Alpha in sequence, which is what loopback and the emulated
// cluster, where a message's latency is the CPU that moves it, measure.
// The simulator knows its L and sets it (internal/simrun).
type CostModel struct {
	Alpha, Beta, Gamma, SparseGamma float64
	LocalAlpha, LocalBeta           float64
	IndexCodec                      float64
	Latency                         float64
}

// perMessage is what each message of a round costs on top of the round's
// latency (Alpha when Latency is not known).
func (m CostModel) perMessage() float64 { return m.Alpha - m.latency() }

// latency is Latency, at most Alpha.
func (m CostModel) latency() float64 { return min(max(m.Latency, 0), m.Alpha) }

// sparseGamma is SparseGamma or its default.
func (m CostModel) sparseGamma() float64 {
	if m.SparseGamma > 0 {
		return m.SparseGamma
	}
	return m.Gamma * sparseMergeFactor
}

// SparseGammaOrDefault is SparseGamma, or its default when 0: what the
// sparse predictions charge per byte merged (the simulator charges the
// same, transport/sim).
func (m CostModel) SparseGammaOrDefault() float64 { return m.sparseGamma() }

// indexCodec is IndexCodec or its default.
func (m CostModel) indexCodec() float64 {
	if m.IndexCodec > 0 {
		return m.IndexCodec
	}
	return defaultIndexCodec
}

// defaultIndexCodec is the CPU time of quant.EncodeIndices plus
// DecodeIndices (IndexAuto) per index at about 1.6% density, rounded up:
// go test -bench Indices ./quant/ (its cpu-MB/s, 4 bytes per index);
// figures in docs/PERFORMANCE.md, "Lossless index compression".
// Calibration measures it on the job's own CPUs.
const defaultIndexCodec = 4.5e-9

// DefaultCostModel roughly matches TCP over loopback or a 10-25 Gbit/s
// network: 20 us per message, 2.5 GB/s on the wire and 4 GB/s for a
// single-threaded reduction. With it, recursive doubling wins up to tens of
// kilobytes, then Rabenseifner on powers of two and the ring elsewhere.
var DefaultCostModel = CostModel{Alpha: 20e-6, Beta: 1 / 2.5e9, Gamma: 1 / 4e9}

// allreduceAlgos are the candidates of ChooseAllreduce, in the order that
// breaks ties (the cheaper in latency first).
var allreduceAlgos = [...]Algo{AlgoRecursiveDoubling, AlgoRabenseifner, AlgoRing}

// PredictAllreduce returns the modelled time of allreduce algorithm a on a
// vector of the given size in bytes over p ranks, and the largest number of
// bytes any rank sends (exact, for elements one byte wide; see
// AllreduceBytesSent for a given rank and element size). AlgoAuto is
// resolved with ChooseAllreduce. An algorithm that is not a dense
// allreduce costs +Inf.
func (m CostModel) PredictAllreduce(a Algo, bytes, p int) (seconds float64, bytesSentPerRank int64) {
	if a == AlgoAuto {
		a = m.ChooseAllreduce(bytes, p)
	}
	seconds = m.allreduceTime(a, bytes, p)
	for r := range p {
		bytesSentPerRank = max(bytesSentPerRank, AllreduceBytesSent(a, bytes, 1, p, r))
	}
	return seconds, bytesSentPerRank
}

// allreduceTime is the modelled time alone: O(1), cheap enough to run on
// every AlgoAuto call.
func (m CostModel) allreduceTime(a Algo, bytes, p int) (seconds float64) {
	if p <= 1 {
		return 0
	}
	if !isAllreduceAlgo(a) || bytes < 0 {
		return math.Inf(1)
	}
	n := float64(bytes)
	g := newFoldedGroup(p)
	P, Q, L := float64(p), float64(g.pof2), float64(g.levels())
	// Folding costs one full-vector message and reduction in, one out.
	var fold float64
	if g.extra > 0 {
		fold = 2*m.Alpha + 2*n*m.Beta + n*m.Gamma
	}
	switch a {
	case AlgoRing:
		seconds = 2*(P-1)*m.Alpha + 2*(P-1)/P*n*m.Beta + (P-1)/P*n*m.Gamma
	case AlgoRabenseifner:
		seconds = 2*L*m.Alpha + 2*(Q-1)/Q*n*m.Beta + (Q-1)/Q*n*m.Gamma + fold
	case AlgoRecursiveDoubling:
		seconds = L*(m.Alpha+n*m.Beta+n*m.Gamma) + fold
	}
	return seconds
}

// ChooseAllreduce returns the dense allreduce algorithm with the smallest
// predicted time for a vector of the given size in bytes over p ranks. It
// depends only on its arguments, so every rank makes the same choice.
func (m CostModel) ChooseAllreduce(bytes, p int) Algo {
	if p <= 1 {
		return AlgoRing
	}
	best, bestTime := AlgoRing, math.Inf(1)
	for _, a := range allreduceAlgos {
		if t := m.allreduceTime(a, bytes, p); t < bestTime {
			best, bestTime = a, t
		}
	}
	return best
}

func isAllreduceAlgo(a Algo) bool {
	return a == AlgoRing || a == AlgoRabenseifner || a == AlgoRecursiveDoubling
}

// AllreduceBytesSent returns exactly how many payload bytes rank sends when
// allreduce algorithm a runs on count elements of elemSize bytes over p
// ranks, following the same block and window layout as the algorithms.
// Unknown algorithms and p <= 1 send nothing.
func AllreduceBytesSent(a Algo, count, elemSize, p, rank int) int64 {
	if p <= 1 || count < 0 || rank < 0 || rank >= p {
		return 0
	}
	var elems int
	switch a {
	case AlgoRing:
		// Every block but r+1 in the reduce-scatter, every block but r+2
		// in the allgather: block (r-t) at ring step t.
		blocks := balanced(count, p)
		for t := range 2 * (p - 1) {
			lo, hi := blocks.block(mod(rank-t, p))
			elems += hi - lo
		}
	case AlgoRabenseifner:
		elems = rabenseifnerElemsSent(count, p, rank)
	case AlgoRecursiveDoubling:
		g := newFoldedGroup(p)
		elems = foldElemsSent(g, count, rank)
		if g.newRank(rank) >= 0 {
			elems += g.levels() * count
		}
	}
	return int64(elems) * int64(elemSize)
}

// foldElemsSent counts the fold and unfold rounds: the even rank of a
// folded pair sends its vector in, the odd one sends the result back.
func foldElemsSent(g foldedGroup, count, rank int) int {
	if rank < 2*g.extra {
		return count
	}
	return 0
}

func rabenseifnerElemsSent(count, p, rank int) int {
	g := newFoldedGroup(p)
	elems := foldElemsSent(g, count, rank)
	q := g.newRank(rank)
	if q < 0 {
		return elems
	}
	blocks := balanced(count, g.pof2)
	for mask := g.pof2 / 2; mask > 0; mask /= 2 {
		lo, hi := blocks.blocks((q^mask)&^(mask-1), mask)
		elems += hi - lo
	}
	for mask := 1; mask < g.pof2; mask *= 2 {
		lo, hi := blocks.blocks(q&^(mask-1), mask)
		elems += hi - lo
	}
	return elems
}

// PredictBroadcast returns the modelled time of broadcast algorithm a
// (AlgoDirect: binomial tree; AlgoRing: binomial scatter then ring
// allgather, after van de Geijn) for the given size in bytes over p ranks.
// AlgoAuto is resolved with ChooseBroadcast; other algorithms cost +Inf.
func (m CostModel) PredictBroadcast(a Algo, bytes, p int) float64 {
	if a == AlgoAuto {
		a = m.ChooseBroadcast(bytes, p)
	}
	if p <= 1 {
		return 0
	}
	n, P := float64(bytes), float64(p)
	depth := float64(ceilLog2(p))
	switch a {
	case AlgoDirect:
		// The root sends the whole vector to each of its ceil(log2 P)
		// children; segments pipeline the levels below it.
		return depth * (m.Alpha + n*m.Beta)
	case AlgoRing:
		return (depth+P-1)*m.Alpha + 2*(P-1)/P*n*m.Beta
	}
	return math.Inf(1)
}

// ChooseBroadcast returns AlgoDirect (binomial tree) or AlgoRing (scatter
// plus ring allgather), whichever the model predicts faster.
func (m CostModel) ChooseBroadcast(bytes, p int) Algo {
	if m.PredictBroadcast(AlgoRing, bytes, p) < m.PredictBroadcast(AlgoDirect, bytes, p) {
		return AlgoRing
	}
	return AlgoDirect
}

// ceilLog2 returns the smallest l with 1<<l >= p.
func ceilLog2(p int) int {
	l := 0
	for 1<<l < p {
		l++
	}
	return l
}
